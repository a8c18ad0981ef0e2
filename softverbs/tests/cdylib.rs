//! vqp-host's loader opens `libvqp_softverbs.so` by path, as it would open
//! `libibverbs.so.1`, and runs a real RC connection between `soft0` and `soft1`.
//!
//! `cargo test` builds the crate's cdylib next to the test binary
//! (`target/<profile>/deps/`, and uplifts a copy to `target/<profile>/`); the test looks
//! in both, and fails loudly when it is missing.

mod common;

use std::path::PathBuf;

use vqp_host::Verbs;

fn cdylib() -> PathBuf {
    vqp_softverbs::find_cdylib().unwrap_or_else(|| {
        panic!(
            "the cdylib was not built; looked at {:?}",
            vqp_softverbs::cdylib_candidates()
        )
    })
}

fn load() -> Verbs {
    // SAFETY: the library implements the libibverbs ABI.
    unsafe { Verbs::load_from(&cdylib()) }.expect("dlopen the provider")
}

#[test]
fn the_cdylib_resolves_every_symbol_and_lists_its_devices() {
    let verbs = load();
    assert!(verbs.library_path().unwrap().ends_with(".so"));
    let list = vqp_host::DeviceList::new(&verbs).unwrap();
    let names: Vec<String> = list.iter().map(|d| d.name()).collect();
    assert_eq!(names, ["soft0", "soft1"]);
    assert_eq!(
        verbs.wc_status_str(vqp_host::WcStatus::RemAccessErr),
        "remote access error"
    );
    let ctx = vqp_host::Context::open(&verbs, Some("soft1")).unwrap();
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.state(), vqp_host::PortState::Active);
    assert_eq!(port.lid(), 2);
    assert_eq!(port.active_mtu(), vqp_host::Mtu::Mtu4096);
    assert_eq!(port.link_layer(), vqp_host::LinkLayer::InfiniBand);
    let dev = ctx.query_device().unwrap();
    assert_eq!(dev.phys_port_cnt(), 1);
    assert!(dev.max_qp_wr() >= 4096 && dev.max_sge() >= 16);
    assert_eq!(dev.max_qp_rd_atom(), 16);
    let gid = ctx.query_gid(1, 0).unwrap();
    assert_eq!(gid.subnet_prefix(), 0xfe80_0000_0000_0000);
}

#[test]
fn rc_connection_over_the_dlopened_provider() {
    common::exercise_all_ops(&load());
}

#[test]
fn env_path_loads_the_provider() {
    std::env::set_var(vqp_host::loader::ENV_PATH, cdylib());
    let verbs = Verbs::load().expect("VQP_IBVERBS_PATH names the provider");
    assert!(verbs.library_path().unwrap().contains("vqp_softverbs"));
    let ctx = vqp_host::Context::open(&verbs, None).unwrap();
    assert_eq!(ctx.device_name(), "soft0");
}
