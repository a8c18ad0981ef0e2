//! `VQP_IBVERBS_PATH` redirects `Verbs::load` (in every build). Its own test binary, so
//! that changing the environment cannot race with other tests.

mod system;

use vqp_host::{Error, Verbs};

#[test]
fn env_path_pointing_at_a_missing_file_names_it() {
    let path = "/nonexistent/vqp-env-test/libfakeverbs.so";
    std::env::set_var(vqp_host::loader::ENV_PATH, path);
    let err = Verbs::load().expect_err("the file does not exist");
    match &err {
        Error::LibraryNotFound { path: p, .. } => assert_eq!(p, path),
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
    assert!(err.to_string().contains(path), "{err}");

    // An empty value means "not set": the default library, where it is installed.
    std::env::set_var(vqp_host::loader::ENV_PATH, "");
    if system::libibverbs("env_path_pointing_at_a_missing_file_names_it (its empty-value half)")
        .is_none()
    {
        std::env::remove_var(vqp_host::loader::ENV_PATH);
        return;
    }
    let verbs = Verbs::load().expect("falls back to the default library");
    assert_ne!(verbs.library_path(), Some(""));
    std::env::remove_var(vqp_host::loader::ENV_PATH);
}
