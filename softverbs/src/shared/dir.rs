//! The shared namespace directory: where the registry and every process's file live.
//! `$VQP_SOFT_DIR` when set, else `/dev/shm/vqp-softverbs-<uid>` (or the temporary
//! directory where `/dev/shm` is missing).
//!
//! The namespace is a security boundary: its files name the processes whose memory a
//! requester copies to with `process_vm_writev`, so a file another user can plant or
//! rewrite would steer our copies. The directory is therefore opened once, without
//! following a symlink, and checked on the opened descriptor (a directory, owned by the
//! effective user, not writable by group or others); every file in it is opened relative
//! to that descriptor, again without following a symlink, and checked the same way
//! (a regular file, ours, not writable by others) before it is used.

use std::ffi::CString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{sys, SharedError};

/// Environment variable: the shared namespace directory. Processes that name the same
/// directory share devices and QP numbers; tests give each run its own.
pub const ENV_DIR: &str = "VQP_SOFT_DIR";

/// Why a directory or file of the namespace is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The last component is a symbolic link.
    Symlink,
    /// The namespace path is not a directory.
    NotDir,
    /// A file of the namespace is not a regular file.
    NotFile,
    /// Another user owns it.
    Owner { uid: u32, euid: u32 },
    /// Group or others may write it (its permission bits).
    Writable(u32),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Symlink => f.write_str("is a symlink"),
            Refusal::NotDir => f.write_str("is not a directory"),
            Refusal::NotFile => f.write_str("is not a regular file"),
            Refusal::Owner { uid, euid } => write!(f, "is owned by uid {uid}, not {euid}"),
            Refusal::Writable(mode) => {
                write!(f, "is writable by group/others (mode {mode:04o})")
            }
        }
    }
}

/// Why a file of the namespace cannot be opened.
#[derive(Debug)]
pub(crate) enum FileError {
    Io(io::Error),
    Refused(Refusal),
}

impl FileError {
    /// Whether the file does not exist.
    pub(crate) fn is_missing(&self) -> bool {
        matches!(self, FileError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

/// How [`NsDir::open_file`] treats a missing file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Create {
    /// It must exist.
    No,
    /// Created (mode 0600) when missing.
    IfMissing,
    /// Created (mode 0600); an existing file is an error (`AlreadyExists`).
    New,
}

/// The opened, checked namespace directory.
pub(crate) struct NsDir {
    path: PathBuf,
    fd: File,
    euid: u32,
}

/// Refuses metadata of an object another user controls.
fn check_owner(meta: &fs::Metadata, euid: u32) -> Result<(), Refusal> {
    if meta.uid() != euid {
        return Err(Refusal::Owner {
            uid: meta.uid(),
            euid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(Refusal::Writable(mode));
    }
    Ok(())
}

/// The directory the environment names (see the module documentation).
fn configured() -> PathBuf {
    match std::env::var_os(ENV_DIR).filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            let shm = Path::new("/dev/shm");
            let base = if shm.is_dir() {
                shm.to_path_buf()
            } else {
                std::env::temp_dir()
            };
            base.join(format!("vqp-softverbs-{}", sys::euid()))
        }
    }
}

impl NsDir {
    /// The directory this process uses, created (mode 0700) when missing.
    ///
    /// # Errors
    /// [`SharedError::Dir`] when it cannot be created or opened,
    /// [`SharedError::Refused`] when it is a symlink, not a directory, owned by another
    /// user or writable by group or others.
    pub(crate) fn open() -> Result<NsDir, SharedError> {
        NsDir::at(&configured(), sys::euid())
    }

    /// Opens `path` (created 0700 with its parents when missing) for user `euid`.
    pub(crate) fn at(path: &Path, euid: u32) -> Result<NsDir, SharedError> {
        let made = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path);
        // An existing symlink makes `create` fail (or succeed through it): the open
        // below tells which.
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(path);
        let fd = match opened {
            Ok(f) => f,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
                let link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
                let why = if link {
                    Refusal::Symlink
                } else {
                    Refusal::NotDir
                };
                return Err(SharedError::Refused(path.to_path_buf(), why));
            }
            Err(e) => {
                return Err(SharedError::Dir(
                    path.to_path_buf(),
                    made.err().unwrap_or(e),
                ))
            }
        };
        let meta = fd
            .metadata()
            .map_err(|e| SharedError::Dir(path.to_path_buf(), e))?;
        if !meta.is_dir() {
            return Err(SharedError::Refused(path.to_path_buf(), Refusal::NotDir));
        }
        check_owner(&meta, euid).map_err(|r| SharedError::Refused(path.to_path_buf(), r))?;
        Ok(NsDir {
            path: path.to_path_buf(),
            fd,
            euid,
        })
    }

    /// The path of `name` in the directory (for messages).
    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Opens `name` read-write, relative to the directory and without following a
    /// symlink, and checks it: a regular file of ours that group and others cannot
    /// write.
    pub(crate) fn open_file(&self, name: &str, create: Create) -> Result<File, FileError> {
        let flags = libc::O_RDWR
            | match create {
                Create::No => 0,
                Create::IfMissing => libc::O_CREAT,
                Create::New => libc::O_CREAT | libc::O_EXCL,
            };
        let f = match sys::openat(&self.fd, &cname(name)?, flags, 0o600) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(FileError::Refused(Refusal::Symlink))
            }
            Err(e) => return Err(FileError::Io(e)),
        };
        let meta = f.metadata().map_err(FileError::Io)?;
        if !meta.is_file() {
            return Err(FileError::Refused(Refusal::NotFile));
        }
        check_owner(&meta, self.euid).map_err(FileError::Refused)?;
        Ok(f)
    }

    /// Renames `from` to `to` inside the directory.
    pub(crate) fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        sys::renameat(&self.fd, &cname(from)?, &cname(to)?)
    }

    /// Removes `name` from the directory.
    pub(crate) fn remove(&self, name: &str) -> io::Result<()> {
        sys::unlinkat(&self.fd, &cname(name)?)
    }

    /// The names in the directory (read through our descriptor).
    pub(crate) fn names(&self) -> Vec<String> {
        let listed = fs::read_dir(sys::fd_path(&self.fd)).or_else(|_| fs::read_dir(&self.path));
        listed
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn cname(name: &str) -> io::Result<CString> {
    if name.contains('/') {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    CString::new(name).map_err(|_| io::ErrorKind::InvalidInput.into())
}

impl From<io::Error> for FileError {
    fn from(e: io::Error) -> FileError {
        FileError::Io(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn base(name: &str) -> PathBuf {
        let b = std::env::temp_dir().join(format!("vqp-dir-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&b);
        fs::create_dir_all(&b).unwrap();
        b
    }

    fn refusal(r: Result<NsDir, SharedError>) -> Refusal {
        match r {
            Err(SharedError::Refused(_, why)) => why,
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn creates_a_private_directory_and_accepts_it_again() {
        let b = base("private");
        let d = b.join("ns");
        NsDir::at(&d, sys::euid()).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        NsDir::at(&d, sys::euid()).unwrap();
        let other = sys::euid().wrapping_add(1);
        assert!(matches!(
            refusal(NsDir::at(&d, other)),
            Refusal::Owner { .. }
        ));
        fs::write(b.join("file"), b"x").unwrap();
        assert_eq!(
            refusal(NsDir::at(&b.join("file"), sys::euid())),
            Refusal::NotDir
        );
        fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn a_symlink_or_a_writable_directory_is_refused() {
        let b = base("refused");
        let real = b.join("real");
        NsDir::at(&real, sys::euid()).unwrap();
        std::os::unix::fs::symlink(&real, b.join("link")).unwrap();
        assert_eq!(
            refusal(NsDir::at(&b.join("link"), sys::euid())),
            Refusal::Symlink
        );
        fs::set_permissions(&real, fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            refusal(NsDir::at(&real, sys::euid())),
            Refusal::Writable(0o777)
        );
        fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn files_are_opened_without_following_symlinks_and_checked() {
        let b = base("files");
        let d = NsDir::at(&b.join("ns"), sys::euid()).unwrap();
        d.open_file("a", Create::New).unwrap();
        assert!(matches!(
            d.open_file("a", Create::New),
            Err(FileError::Io(e)) if e.kind() == io::ErrorKind::AlreadyExists
        ));
        assert!(d.open_file("b", Create::No).unwrap_err().is_missing());
        std::os::unix::fs::symlink(b.join("elsewhere"), b.join("ns/c")).unwrap();
        assert!(matches!(
            d.open_file("c", Create::IfMissing),
            Err(FileError::Refused(Refusal::Symlink))
        ));
        assert!(
            !b.join("elsewhere").exists(),
            "nothing created through the link"
        );
        fs::set_permissions(b.join("ns/a"), fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            d.open_file("a", Create::No),
            Err(FileError::Refused(Refusal::Writable(0o666)))
        ));
        d.rename("a", "a2").unwrap();
        d.remove("a2").unwrap();
        assert_eq!(d.names(), vec!["c".to_string()]);
        assert!(d.open_file("../x", Create::IfMissing).is_err());
        fs::remove_dir_all(&b).unwrap();
    }
}
