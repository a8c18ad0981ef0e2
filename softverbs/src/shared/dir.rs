//! The shared namespace directory: where the registry and every process's inbox file
//! live. `$VQP_SOFT_DIR` when set, else `/dev/shm/vqp-softverbs-<uid>` (or the temporary
//! directory where `/dev/shm` is missing).

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::{sys, SharedError};

/// Environment variable: the shared namespace directory. Processes that name the same
/// directory share devices and QP numbers; tests give each run its own.
pub const ENV_DIR: &str = "VQP_SOFT_DIR";

/// The directory this process uses, created (mode 0700) when missing.
///
/// # Errors
/// [`SharedError::Dir`] when it cannot be created or is not a directory,
/// [`SharedError::Owner`] when another user owns it (its files would let that user
/// read and write our registered memory).
pub(crate) fn namespace_dir() -> Result<PathBuf, SharedError> {
    let uid = sys::euid();
    let dir = match std::env::var_os(ENV_DIR).filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            let shm = Path::new("/dev/shm");
            let base = if shm.is_dir() {
                shm.to_path_buf()
            } else {
                std::env::temp_dir()
            };
            base.join(format!("vqp-softverbs-{uid}"))
        }
    };
    ensure(&dir, uid)?;
    Ok(dir)
}

/// Creates `dir` (0700) if needed and checks that `uid` owns it.
pub(crate) fn ensure(dir: &Path, uid: u32) -> Result<(), SharedError> {
    let made = fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    if let Err(e) = made {
        return Err(SharedError::Dir(dir.to_path_buf(), e.kind()));
    }
    let meta = fs::metadata(dir).map_err(|e| SharedError::Dir(dir.to_path_buf(), e.kind()))?;
    if !meta.is_dir() {
        return Err(SharedError::Dir(
            dir.to_path_buf(),
            std::io::ErrorKind::InvalidInput,
        ));
    }
    if meta.uid() != uid {
        return Err(SharedError::Owner(dir.to_path_buf(), meta.uid()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_a_private_directory_and_accepts_it_again() {
        let base = std::env::temp_dir().join(format!("vqp-dir-test-{}", std::process::id()));
        let d = base.join("ns");
        ensure(&d, sys::euid()).unwrap();
        let mode = fs::metadata(&d).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        ensure(&d, sys::euid()).unwrap();
        let other = sys::euid().wrapping_add(1);
        assert!(matches!(ensure(&d, other), Err(SharedError::Owner(_, _))));
        fs::write(base.join("file"), b"x").unwrap();
        assert!(matches!(
            ensure(&base.join("file"), sys::euid()),
            Err(SharedError::Dir(_, _))
        ));
        fs::remove_dir_all(&base).unwrap();
    }
}
