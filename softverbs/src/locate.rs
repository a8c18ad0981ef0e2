//! Finding `libvqp_softverbs.so` for a program of this workspace that wants to
//! `dlopen` it, as it would `libibverbs.so.1`.
//!
//! Cargo builds the cdylib into `target/<profile>/deps/` whenever a package depends on
//! this crate (and uplifts a copy to `target/<profile>/` when this package itself is
//! built). Test binaries live in `deps/`, examples in `examples/`, the package's own
//! binaries (`softverbs`) in `target/<profile>/`; looking in the binary's own directory,
//! in `deps/` below it, in `../deps` and in `..` covers them all.

use std::path::PathBuf;

/// The places [`find_cdylib`] looks, in order, for the running binary.
pub fn cdylib_candidates() -> Vec<PathBuf> {
    cdylib_candidates_of("vqp_softverbs")
}

/// The places a cdylib of this workspace with crate name `stem` (`vqp_softverbs`,
/// `vqp_rdmacm`) is looked for, in order, for the running binary.
pub fn cdylib_candidates_of(stem: &str) -> Vec<PathBuf> {
    let name = format!(
        "{}{stem}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(PathBuf::from))
    else {
        return Vec::new();
    };
    let mut out = vec![dir.join(&name), dir.join("deps").join(&name)];
    if let Some(profile) = dir.parent() {
        out.push(profile.join("deps").join(&name));
        out.push(profile.join(&name));
    }
    out
}

/// The softverbs cdylib cargo built next to the running binary, if there is one.
pub fn find_cdylib() -> Option<PathBuf> {
    cdylib_candidates().into_iter().find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_name_the_library_beside_and_above_the_binary() {
        let c = cdylib_candidates();
        assert_eq!(c.len(), 4);
        let name = format!(
            "{}vqp_softverbs{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        );
        assert!(c.iter().all(|p| p.ends_with(&name)));
        let exe_dir = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        assert_eq!(c[0].parent(), Some(exe_dir.as_path()));
        assert_eq!(c[1].parent(), Some(exe_dir.join("deps").as_path()));
        assert!(c[2].parent().unwrap().ends_with("deps"));
    }
}
