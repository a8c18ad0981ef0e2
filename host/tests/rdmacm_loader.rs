//! Loading librdmacm at run time: an absent library and one without the `rdma_*`
//! functions are typed errors; vqp-rdmacm's library (`cargo build -p vqp-rdmacm`), on
//! softverbs, loads and answers through the table.
//!
//! Not in the `linked` build: there softverbs is this crate's dev-dependency without
//! its C symbols, so it cannot stand in for libibverbs under vqp-rdmacm; the workspace
//! run has them.
#![cfg(not(feature = "linked"))]

use std::path::Path;
use std::ptr;

use vqp_host::loader::cm::{RdmaCm, ENV_PATH};
use vqp_host::sys::cm::{event, RDMA_PS_TCP};
use vqp_host::Error;

/// The cdylib `crate` as cargo built it: the copy in `target/<profile>/` when there is
/// one (a `cargo test -p vqp-host` alone builds this crate's dev-dependency into `deps/`
/// without softverbs' C symbols), else the one in `deps/`.
fn built(krate: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(std::path::Path::parent).unwrap();
    let name = format!(
        "{}{krate}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    // `cargo build` copies it up to the profile directory; a workspace test run leaves
    // it in `deps/` only (with the features of the whole workspace, C symbols included).
    let candidates = [profile.join(&name), profile.join("deps").join(&name)];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{name} is missing at {candidates:?}: build it with `cargo build -p vqp-softverbs -p vqp-rdmacm`"
            )
        })
}

#[test]
fn an_absent_library_is_a_typed_error() {
    // SAFETY: nothing is loaded: the file does not exist.
    let e = unsafe { RdmaCm::load_from(Path::new("/nonexistent/librdmacm.so.1")) }.unwrap_err();
    match &e {
        Error::RdmaCmLibrary { path, .. } => assert_eq!(path, "/nonexistent/librdmacm.so.1"),
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("cannot use the RDMA-CM library \"/nonexistent/librdmacm.so.1\""),
        "{e}"
    );
}

#[test]
fn a_library_without_the_rdma_functions_is_a_typed_error() {
    let sv = vqp_softverbs::find_cdylib().expect("softverbs' cdylib is built");
    // SAFETY: softverbs' library is a well-behaved shared library; none of its
    // functions is called.
    let e = unsafe { RdmaCm::load_from(&sv) }.unwrap_err();
    match &e {
        Error::RdmaCmLibrary { reason, .. } => {
            assert_eq!(reason, "it does not export rdma_create_event_channel")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn vqp_rdmacm_loads_from_the_environment_and_resolves_an_address() {
    let dir = std::env::temp_dir().join(format!("vqp-host-rdmacm-{}", std::process::id()));
    std::env::set_var("VQP_SOFT_DIR", &dir);
    std::env::set_var("VQP_IBVERBS_PATH", built("vqp_softverbs"));
    let lib = built("vqp_rdmacm");
    std::env::set_var(ENV_PATH, &lib);
    let cm = RdmaCm::load().expect("vqp-rdmacm loads");
    assert_eq!(cm.library_path(), lib.display().to_string());
    assert_eq!(
        cm.event_str(event::ESTABLISHED),
        "RDMA_CM_EVENT_ESTABLISHED"
    );
    let t = cm.table();
    // SAFETY: the calls below follow rdma_cma.h: a channel, an id on it, an address
    // resolution, its event taken and acknowledged, then everything destroyed.
    unsafe {
        let ch = (t.rdma_create_event_channel)();
        assert!(!ch.is_null());
        let mut id = ptr::null_mut();
        assert_eq!(
            (t.rdma_create_id)(ch, &mut id, ptr::null_mut(), RDMA_PS_TCP),
            0
        );
        let mut dst: libc::sockaddr_in = core::mem::zeroed();
        dst.sin_family = libc::AF_INET as libc::sa_family_t;
        dst.sin_port = 7174u16.to_be();
        dst.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
        let got = (t.rdma_resolve_addr)(
            id,
            ptr::null_mut(),
            (&mut dst as *mut libc::sockaddr_in).cast(),
            1000,
        );
        assert_eq!(got, 0, "{}", std::io::Error::last_os_error());
        let mut ev = ptr::null_mut();
        assert_eq!((t.rdma_get_cm_event)(ch, &mut ev), 0);
        assert_eq!((*ev).event, event::ADDR_RESOLVED);
        assert_eq!((*ev).id, id);
        assert_eq!((t.rdma_ack_cm_event)(ev), 0);
        assert_eq!((t.rdma_destroy_id)(id), 0);
        (t.rdma_destroy_event_channel)(ch);
    }
    let _ = std::fs::remove_dir_all(dir);
}
