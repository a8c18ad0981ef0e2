//! The rendezvous directory: `<softverbs directory>/rdmacm/`, where every process using
//! this library binds its datagram socket and every listener its own.
//!
//! The softverbs directory is `$VQP_SOFT_DIR`, else `/dev/shm/vqp-softverbs-<euid>` —
//! the one softverbs uses, so that processes sharing devices share the CM too. As
//! softverbs treats that directory, this one is a security boundary: it is created
//! with mode 0700, opened without following a symlink and checked on the open
//! descriptor (a directory, owned by the effective user, not writable by group or
//! others), and sockets are addressed through that descriptor
//! (`/proc/self/fd/<n>/<name>`), which also keeps every address short of `sun_path`'s
//! 108 bytes whatever the directory's path.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

/// The variable softverbs reads for its shared directory.
pub const ENV_DIR: &str = "VQP_SOFT_DIR";

/// The opened, checked rendezvous directory.
pub struct Dir {
    fd: File,
    path: PathBuf,
}

/// The softverbs directory the environment names.
fn softverbs_dir() -> PathBuf {
    match std::env::var_os(ENV_DIR).filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            // SAFETY: `geteuid` has no preconditions.
            let euid = unsafe { libc::geteuid() };
            let shm = Path::new("/dev/shm");
            let base = if shm.is_dir() {
                shm.to_path_buf()
            } else {
                std::env::temp_dir()
            };
            base.join(format!("vqp-softverbs-{euid}"))
        }
    }
}

/// Opens `path` as a directory without following a final symlink.
fn open_dir(path: &Path) -> io::Result<File> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata()?;
    // SAFETY: `geteuid` has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            path.display()
        )));
    }
    if meta.uid() != euid || meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is owned by uid {} with mode {:04o}; it must be the user's and not \
                 writable by others",
                path.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(file)
}

impl Dir {
    /// The directory of this process's environment, created when missing.
    ///
    /// # Errors
    /// The directory cannot be made or fails the checks of the module documentation.
    pub fn open() -> io::Result<Dir> {
        let path = softverbs_dir().join("rdmacm");
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        match b.create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let fd = open_dir(&path)?;
        Ok(Dir { fd, path })
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The address of the socket `name` in the directory, through its descriptor.
    pub fn socket_path(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.fd.as_raw_fd()))
    }
}
