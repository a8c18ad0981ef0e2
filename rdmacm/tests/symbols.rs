//! The cdylib as a `librdmacm.so.1`: its SONAME, rdma-core's version nodes, every name
//! of `librdmacm.map` exported under its version (and under no other), everything the
//! system's librdmacm exports (where `librdmacm1` is installed) exported too, and the
//! functions not implemented failing with `ENOSYS`.

#[path = "../../softverbs/tests/elf/mod.rs"]
mod elf;
#[allow(dead_code)]
#[path = "../../sys/tests/system/gate.rs"]
mod gate;

use std::collections::BTreeMap;
use std::path::PathBuf;

const MAP: &str = include_str!("../librdmacm.map");

fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    [
        dir.join("libvqp_rdmacm.so"),
        dir.join("../libvqp_rdmacm.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("cargo builds the cdylib beside the tests")
}

/// Each name of the map and its version node.
fn names() -> BTreeMap<String, String> {
    let nodes = vqp_softverbs::symbols::parse_map(MAP).unwrap();
    let mut out = BTreeMap::new();
    for n in &nodes {
        for s in &n.symbols {
            let old = out.insert(s.clone(), n.name.clone());
            assert!(
                old.is_none() || old.as_deref() == Some(n.name.as_str()),
                "{s}"
            );
        }
    }
    out
}

#[test]
fn the_library_says_it_is_librdmacm_so_1_with_rdma_cores_versions() {
    let data = std::fs::read(cdylib()).unwrap();
    let info = elf::read(&data).unwrap();
    assert_eq!(info.soname.as_deref(), Some("librdmacm.so.1"));
    let want: Vec<String> = (0..=5).map(|m| format!("RDMACM_1.{m}")).collect();
    assert_eq!(info.versions, want);
}

#[test]
fn every_name_of_the_map_is_exported_under_its_version_only() {
    let data = std::fs::read(cdylib()).unwrap();
    let info = elf::read(&data).unwrap();
    let names = names();
    assert!(names.len() > 70, "{}", names.len());
    for (name, version) in &names {
        let found: Vec<_> = info.symbols.iter().filter(|s| &s.name == name).collect();
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        assert_eq!(
            found[0].version.as_deref(),
            Some(version.as_str()),
            "{name}"
        );
        assert!(found[0].default, "{name}");
    }
}

#[test]
fn everything_the_systems_librdmacm_exports_is_exported_too() {
    let system = [
        "/usr/lib/x86_64-linux-gnu/librdmacm.so.1",
        "/usr/lib/aarch64-linux-gnu/librdmacm.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).is_file());
    let Some(system) = system else {
        let test = "everything_the_systems_librdmacm_exports_is_exported_too";
        gate::skip(
            test,
            "librdmacm1",
            "there is no librdmacm.so.1 to compare with",
        );
        return;
    };
    let theirs = elf::read(&std::fs::read(system).unwrap()).unwrap();
    let ours = elf::read(&std::fs::read(cdylib()).unwrap()).unwrap();
    // Functions, not the version nodes' own absolute symbols (`RDMACM_1.0`).
    for s in theirs
        .symbols
        .iter()
        .filter(|s| s.version.is_some() && s.kind == 2)
    {
        assert!(
            ours.symbols
                .iter()
                .any(|o| o.name == s.name && o.version == s.version),
            "{}@{:?} is missing",
            s.name,
            s.version
        );
    }
}

#[test]
fn what_is_not_implemented_fails_with_enosys() {
    use vqp_rdmacm::capi;
    let errno = || std::io::Error::last_os_error().raw_os_error();
    let ptr = std::ptr::null_mut;
    // SAFETY: stubs that read none of their arguments.
    unsafe {
        assert_eq!(capi::rselect(0, ptr(), ptr(), ptr(), ptr()), -1);
        assert_eq!(errno(), Some(libc::ENOSYS));
        assert_eq!(capi::repoll_create(1), -1);
        assert_eq!(errno(), Some(libc::ENOSYS));
        assert_eq!(capi::rdma_join_multicast(ptr(), ptr(), ptr()), -1);
        assert_eq!(errno(), Some(libc::ENOSYS));
    }
}
