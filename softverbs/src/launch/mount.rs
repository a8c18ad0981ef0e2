//! The system calls behind `softverbs run`: entering a private mount namespace (with a
//! user namespace when not root), and laying a tmpfs over a directory that keeps what the
//! directory held — every entry bound from the directory underneath — so that entries can
//! be added (`/dev/infiniband`, `/sys/class/infiniband`) without writing to the machine's
//! `/dev` (a devtmpfs shared with the host even from another mount namespace) or `/sys`.

use std::ffi::CString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use super::tree::Node;

/// A step of the set-up that failed, why, and what to do about it.
#[derive(Debug)]
pub struct SetupError {
    /// What was being done (`unshare(CLONE_NEWNS)`, `mount tmpfs on /dev`, …).
    pub step: String,
    /// The error the system returned.
    pub source: io::Error,
    /// What the user can do.
    pub hint: &'static str,
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; {}", self.step, self.source, self.hint)
    }
}

impl std::error::Error for SetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

const HINT_USERNS: &str = "allow unprivileged user namespaces (sysctl user.max_user_namespaces \
     above 0; kernel.unprivileged_userns_clone=1 where the kernel has it; \
     kernel.apparmor_restrict_unprivileged_userns=0 under AppArmor) or run softverbs run as root";
const HINT_ROOT: &str = "softverbs run needs CAP_SYS_ADMIN to make a mount namespace \
     (in a container: a seccomp profile that allows unshare, or --cap-add SYS_ADMIN)";
const HINT_MOUNT: &str = "the private namespace was made but mounting in it failed; \
     nothing outside it was changed";

fn failed(step: impl Into<String>, hint: &'static str) -> impl FnOnce(io::Error) -> SetupError {
    move |source| SetupError {
        step: step.into(),
        source,
        hint,
    }
}

fn cstring(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn path_cstring(p: &Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt as _;
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `mount(2)`; `None` arguments are passed as null.
fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let source = source.map(path_cstring).transpose()?;
    let target = path_cstring(target)?;
    let fstype = fstype.map(cstring).transpose()?;
    let data = data.map(cstring).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(core::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is null or a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `unshare(2)`.
fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `unshare` takes flags only; the process is single-threaded here (the
    // launcher starts no thread), which CLONE_NEWUSER requires.
    if unsafe { libc::unshare(flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the process runs as root in its user namespace.
fn is_root() -> bool {
    // SAFETY: `geteuid` has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A user namespace in which the caller keeps its own uid and gid (a one-line identity
/// map, so files and the shared namespace directory look as they do outside) and has
/// the capabilities to mount in the mount namespace made with it.
fn enter_user_namespace() -> Result<(), SetupError> {
    // SAFETY: `getuid` and `getgid` have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS)
        .map_err(failed("unshare(CLONE_NEWUSER|CLONE_NEWNS)", HINT_USERNS))?;
    // An unprivileged process may write its gid map only once setgroups is denied.
    std::fs::write("/proc/self/setgroups", "deny")
        .map_err(failed("writing /proc/self/setgroups", HINT_USERNS))?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))
        .map_err(failed("writing /proc/self/uid_map", HINT_USERNS))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))
        .map_err(failed("writing /proc/self/gid_map", HINT_USERNS))?;
    Ok(())
}

/// Moves the process into a mount namespace of its own — as root, `CLONE_NEWNS` alone
/// (falling back to a user namespace where that is refused); otherwise with a user
/// namespace — and makes every mount in it private, so that nothing mounted here
/// propagates to the machine's namespace.
pub fn enter_private_namespace() -> Result<(), SetupError> {
    let root = is_root();
    if !root || unshare(libc::CLONE_NEWNS).is_err() {
        enter_user_namespace().map_err(|e| {
            if root {
                SetupError {
                    hint: HINT_ROOT,
                    ..e
                }
            } else {
                e
            }
        })?;
    }
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
    .map_err(failed(
        "making / private (mount --make-rprivate /)",
        HINT_MOUNT,
    ))
}

/// Binds `source` (a directory, with what is mounted below it, or any other file) onto
/// `target`.
fn bind(source: &Path, target: &Path) -> io::Result<()> {
    mount(
        Some(source),
        target,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )
}

/// A directory as it was before a tmpfs was laid over it, still reachable.
pub struct Underneath {
    /// An `O_PATH` handle on the covered directory.
    _dir: File,
    /// `/proc/self/fd/<n>`: the covered directory, as a path mount(2) resolves.
    path: PathBuf,
}

impl Underneath {
    /// The covered directory's entry `name`.
    pub fn entry(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

/// Lays a tmpfs over `dir` that holds every entry `dir` held except those named in
/// `skip` — directories and files bound from underneath, symbolic links copied — and
/// returns the covered directory.
pub fn overlay(dir: &Path, skip: &[&str]) -> Result<Underneath, SetupError> {
    let step = |what: &str| format!("{what} {}", dir.display());
    let under = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .map_err(failed(step("opening"), HINT_MOUNT))?;
    let under = Underneath {
        path: PathBuf::from(format!("/proc/self/fd/{}", under.as_raw_fd())),
        _dir: under,
    };
    let entries = std::fs::read_dir(dir)
        .and_then(|it| it.collect::<io::Result<Vec<_>>>())
        .map_err(failed(step("listing"), HINT_MOUNT))?;
    mount(
        Some(Path::new("tmpfs")),
        dir,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some("mode=0755,size=4m"),
    )
    .map_err(failed(step("mounting a tmpfs on"), HINT_MOUNT))?;
    for e in entries {
        let name = e.file_name();
        if skip.iter().any(|s| name == *s) {
            continue;
        }
        let (source, target) = (under.path.join(&name), dir.join(&name));
        let kind = e
            .file_type()
            .map_err(failed(step("reading an entry of"), HINT_MOUNT))?;
        let done = if kind.is_symlink() {
            std::fs::read_link(&source).and_then(|t| std::os::unix::fs::symlink(t, &target))
        } else if kind.is_dir() {
            std::fs::create_dir(&target).and_then(|()| bind(&source, &target))
        } else {
            File::create(&target).and_then(|_| bind(&source, &target))
        };
        done.map_err(failed(
            format!(
                "presenting {} in the new {}",
                target.display(),
                dir.display()
            ),
            HINT_MOUNT,
        ))?;
    }
    Ok(under)
}

/// Makes `/dev/infiniband/uverbs0..devices` — each the machine's `/dev/null` bound onto
/// a file, which presents a readable and writable character device without
/// `CAP_MKNOD` — over a `/dev` that keeps everything else of the machine's, and
/// `/dev/infiniband/rdma_cm` likewise when `rdma_cm`. Returns the `major:minor` of that
/// character device.
pub fn present_dev(devices: usize, rdma_cm: bool) -> Result<(u32, u32), SetupError> {
    let dev = Path::new("/dev");
    let under = overlay(dev, &["infiniband"])?;
    let null = under.entry("null");
    let meta = std::fs::metadata(&null).map_err(failed("looking at /dev/null", HINT_MOUNT))?;
    if !meta.file_type().is_char_device() {
        return Err(SetupError {
            step: "looking at /dev/null".into(),
            source: io::Error::other("not a character device"),
            hint: HINT_MOUNT,
        });
    }
    use std::os::unix::fs::MetadataExt as _;
    let rdev = meta.rdev();
    let dir = dev.join("infiniband");
    std::fs::create_dir(&dir).map_err(failed("making /dev/infiniband", HINT_MOUNT))?;
    let names = (0..devices)
        .map(|i| format!("uverbs{i}"))
        .chain(rdma_cm.then(|| "rdma_cm".to_string()));
    for name in names {
        let file = dir.join(name);
        File::create(&file)
            .and_then(|_| bind(&null, &file))
            .map_err(failed(format!("presenting {}", file.display()), HINT_MOUNT))?;
    }
    Ok((libc::major(rdev), libc::minor(rdev)))
}

/// Writes `nodes` into a `/sys/class` that keeps every class of the machine's (a class
/// of the same name, `infiniband` on a machine with a NIC, is hidden), then makes the
/// new tmpfs read-only, as sysfs attributes are.
pub fn present_sys(nodes: &[Node]) -> Result<(), SetupError> {
    let class = Path::new("/sys/class");
    let mut skip: Vec<&str> = Vec::new();
    for n in nodes {
        if let Node::Dir(p) = n {
            if !p.contains('/') {
                skip.push(p);
            }
        }
    }
    let _under = overlay(class, &skip)?;
    for n in nodes {
        let done = match n {
            Node::Dir(p) => std::fs::create_dir(class.join(p)),
            Node::File(p, text) => std::fs::write(class.join(p), text).and_then(|()| {
                std::fs::set_permissions(class.join(p), std::fs::Permissions::from_mode(0o444))
            }),
            Node::Link(p, target) => std::os::unix::fs::symlink(target, class.join(p)),
        };
        let p = match n {
            Node::Dir(p) | Node::File(p, _) | Node::Link(p, _) => p,
        };
        done.map_err(failed(format!("writing /sys/class/{p}"), HINT_MOUNT))?;
    }
    mount(
        None,
        class,
        None,
        libc::MS_REMOUNT
            | libc::MS_BIND
            | libc::MS_RDONLY
            | libc::MS_NOSUID
            | libc::MS_NODEV
            | libc::MS_NOEXEC,
        None,
    )
    .map_err(failed("making /sys/class read-only", HINT_MOUNT))
}
