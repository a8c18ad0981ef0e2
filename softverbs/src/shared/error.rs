//! Why the shared namespace cannot be used, as a message that names the path and what
//! is wrong with it, and as the errno `ibv_create_qp` reports.

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::dir::{Refusal, ENV_DIR};

/// Why the shared namespace cannot be used (every `ibv_create_qp` then fails with
/// [`SharedError::errno`]).
#[derive(Debug)]
pub(crate) enum SharedError {
    /// The directory cannot be created or opened.
    Dir(PathBuf, io::Error),
    /// The directory or one of its files is refused: a symlink, not a directory or
    /// regular file, another user's, or writable by group or others.
    Refused(PathBuf, Refusal),
    /// The registry cannot be opened, locked or mapped.
    Registry(PathBuf, &'static str, io::Error),
    /// The registry is damaged or holds another format (and why).
    Format(PathBuf, String),
    /// This process's file cannot be created.
    Inbox(PathBuf, io::Error),
}

impl SharedError {
    /// The errno `ibv_create_qp` reports: `EACCES` for a refused directory or file (as
    /// rdma-core's `ibv_open_device` reports a `/dev/infiniband/uverbs*` the user may
    /// not open), `EPROTO` for a damaged or foreign registry, else the system's error.
    pub(crate) fn errno(&self) -> i32 {
        match self {
            SharedError::Refused(..) => libc::EACCES,
            SharedError::Format(..) => libc::EPROTO,
            SharedError::Dir(_, e) | SharedError::Registry(_, _, e) | SharedError::Inbox(_, e) => {
                e.raw_os_error().unwrap_or(libc::EIO)
            }
        }
    }
}

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SharedError::Dir(p, e) => write!(f, "cannot use directory {}: {e}", p.display()),
            SharedError::Refused(p, why) => write!(
                f,
                "{} {why}; refused (set {ENV_DIR} to a directory of ours that only we can \
                 write)",
                p.display()
            ),
            SharedError::Registry(p, what, e) => {
                write!(f, "registry {}: {what} failed: {e}", p.display())
            }
            SharedError::Format(p, why) => write!(
                f,
                "registry {} is damaged or of another version ({why}); remove it when no \
                 process uses it",
                p.display()
            ),
            SharedError::Inbox(p, e) => write!(f, "inbox {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for SharedError {}
