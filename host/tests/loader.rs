//! The loader against real libraries on a machine without RDMA hardware: the system's
//! libibverbs loads and reports "no devices" as an error value; a missing file and a
//! library without the verbs symbols give their own typed errors.

//!
//! The tests that need the system's libibverbs are skipped, naming the package, where it
//! is not installed (see `system`).

mod system;

use std::path::Path;

use vqp_host::{Context, DeviceList, Error, Verbs, WcStatus};

fn assert_no_devices(err: &Error) {
    assert!(
        matches!(err, Error::NoDevices { .. }),
        "expected NoDevices, got {err:?}"
    );
    assert!(
        err.to_string().starts_with("no RDMA devices found"),
        "{err}"
    );
}

#[test]
fn real_libibverbs_loads_and_reports_no_devices() {
    let Some(verbs) = system::libibverbs("real_libibverbs_loads_and_reports_no_devices") else {
        return;
    };
    assert_eq!(verbs.library_path(), Some("libibverbs.so.1"));
    match DeviceList::new(&verbs) {
        Err(e) => assert_no_devices(&e),
        Ok(list) => panic!("this machine has no RDMA devices, yet the list holds {list:?}"),
    }
    let err = Context::open(&verbs, None).expect_err("no device to open");
    assert_no_devices(&err);
    let err = Context::open(&verbs, Some("mlx5_0")).expect_err("no device to open");
    assert_no_devices(&err);
    eprintln!("libibverbs here says: {err}");
}

#[test]
fn default_load_reports_no_devices() {
    // Default build: dlopen of libibverbs.so.1; `linked` build: the link-time table.
    if system::libibverbs("default_load_reports_no_devices").is_none() {
        return;
    }
    let verbs = Verbs::load().expect("the verbs library loads");
    let err = Context::open(&verbs, None).expect_err("no device to open");
    assert_no_devices(&err);
}

#[test]
fn status_strings_match_the_library() {
    let Some(verbs) = system::libibverbs("status_strings_match_the_library") else {
        return;
    };
    for raw in 0..40 {
        let status = WcStatus::from_raw(raw);
        assert_eq!(status.as_str(), verbs.wc_status_str(status), "status {raw}");
    }
    assert_eq!(
        WcStatus::Unknown(12345).as_str(),
        verbs.wc_status_str(WcStatus::Unknown(12345))
    );
}

#[test]
fn missing_library_names_the_path() {
    let path = Path::new("/nonexistent/vqp-test/libibverbs-missing.so");
    // SAFETY: the file does not exist, so nothing is loaded.
    let err = unsafe { Verbs::load_from(path) }.expect_err("no such file");
    match &err {
        Error::LibraryNotFound { path: p, reason } => {
            assert_eq!(p, "/nonexistent/vqp-test/libibverbs-missing.so");
            assert!(!reason.is_empty());
        }
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("/nonexistent/vqp-test/libibverbs-missing.so"),
        "{text}"
    );
}

#[test]
fn library_without_verbs_names_the_missing_symbol() {
    // libc is a real shared library that exports none of the ibv_* functions; nothing
    // from it is ever called as a verb, because resolution stops at the first miss.
    // SAFETY: libc is already loaded in this process; opening it again runs nothing new.
    let err =
        unsafe { Verbs::load_from(Path::new("libc.so.6")) }.expect_err("libc is no verbs library");
    match &err {
        Error::SymbolMissing { symbol, library } => {
            assert_eq!(*symbol, "ibv_get_device_list");
            assert_eq!(library, "libc.so.6");
        }
        other => panic!("expected SymbolMissing, got {other:?}"),
    }
    assert!(err.to_string().contains("ibv_get_device_list"), "{err}");
}

#[test]
fn symbols_resolve_at_the_versions_libibverbs_exports() {
    use vqp_host::VerbsTable;
    // Every symbol of the table is looked up by version; the list is what the loader
    // asks for and what the docs promise.
    for (name, version) in VerbsTable::SYMBOLS {
        assert!(name.starts_with("ibv_"), "{name}");
        assert!(version.starts_with("IBVERBS_1."), "{name}@{version}");
    }
    assert_eq!(VerbsTable::SYMBOLS.len(), 30);
    // Loading succeeds only if every (name, version) pair resolves in the real library.
    let _ = system::libibverbs("symbols_resolve_at_the_versions_libibverbs_exports");
}
