//! The cdylib as a `libibverbs.so.1`: its SONAME, rdma-core's version nodes, every
//! (name, version) pair of `libibverbs.map` exported as the map says, found by the
//! dynamic loader (`dlsym`, `dlvsym`), and the old-version and private entries doing
//! what they should when called.

mod elf;

use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;

use vqp_softverbs::symbols::{self, Export, StubKind, Target};

fn cdylib() -> PathBuf {
    vqp_softverbs::find_cdylib().unwrap_or_else(|| {
        panic!(
            "the cdylib was not built; looked at {:?}",
            vqp_softverbs::cdylib_candidates()
        )
    })
}

fn exports() -> Vec<Export> {
    let nodes = symbols::parse_map(symbols::LIBIBVERBS_MAP).unwrap();
    symbols::exports(&nodes).unwrap()
}

/// The cdylib, opened once for the whole test binary (it is never closed: `-z nodelete`).
fn handle() -> *mut c_void {
    use std::sync::OnceLock;
    static H: OnceLock<usize> = OnceLock::new();
    *H.get_or_init(|| {
        let path = CString::new(cdylib().to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path; the library's constructors are Rust's.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen {}", cdylib().display());
        h as usize
    }) as *mut c_void
}

fn sym(name: &str) -> *mut c_void {
    let n = CString::new(name).unwrap();
    // SAFETY: a live handle; a NUL-terminated name.
    unsafe { libc::dlsym(handle(), n.as_ptr()) }
}

fn vsym(name: &str, version: &str) -> *mut c_void {
    let (n, v) = (CString::new(name).unwrap(), CString::new(version).unwrap());
    // SAFETY: a live handle; NUL-terminated strings.
    unsafe { libc::dlvsym(handle(), n.as_ptr(), v.as_ptr()) }
}

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

#[test]
fn the_library_says_it_is_libibverbs_so_1_with_rdma_cores_versions() {
    let data = std::fs::read(cdylib()).unwrap();
    let info = elf::read(&data).unwrap();
    assert_eq!(info.soname.as_deref(), Some("libibverbs.so.1"));
    let nodes = symbols::parse_map(symbols::LIBIBVERBS_MAP).unwrap();
    let want: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(info.versions, want);
    assert!(info.versions.contains(&"IBVERBS_1.6".to_string()));
}

#[test]
fn every_pair_of_the_map_is_exported_with_its_version_and_kind() {
    let data = std::fs::read(cdylib()).unwrap();
    let info = elf::read(&data).unwrap();
    let ex = exports();
    for e in &ex {
        let kind = if e.target == Target::Stub(StubKind::Data) {
            1
        } else {
            2
        };
        let s = elf::VersionedSymbol {
            name: e.name.clone(),
            version: Some(e.version.clone()),
            default: e.default,
            kind,
        };
        assert!(
            info.symbols.contains(&s),
            "{} is not exported as {s:?}",
            e.versioned_name()
        );
    }
    // Every name of the map is exported under versions only: no unversioned duplicate
    // that could satisfy a reference to a version the map does not give it.
    let names: BTreeSet<&str> = ex.iter().map(|e| e.name.as_str()).collect();
    for s in &info.symbols {
        if names.contains(s.name.as_str()) {
            assert!(s.version.is_some(), "{} is exported unversioned", s.name);
        }
    }
    // The map is rdma-core's: the names perftest and ibv_devinfo need are there.
    for (name, version) in [
        ("ibv_get_device_list", "IBVERBS_1.1"),
        ("ibv_qp_to_qp_ex", "IBVERBS_1.6"),
        ("ibv_reg_mr_iova2", "IBVERBS_1.8"),
        ("_ibv_query_gid_ex", "IBVERBS_1.11"),
        ("ibv_read_sysfs_file", "IBVERBS_1.0"),
        ("ibv_query_gid_type", "IBVERBS_PRIVATE_34"),
        ("ibv_cmd_destroy_cq", "IBVERBS_PRIVATE_34"),
    ] {
        assert!(
            ex.iter().any(|e| e.name == name && e.version == version),
            "{name}@{version}"
        );
    }
}

#[test]
fn every_public_name_resolves_with_dlsym() {
    let nodes = symbols::parse_map(symbols::LIBIBVERBS_MAP).unwrap();
    let public: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| !symbols::is_private(&n.name))
        .flat_map(|n| n.symbols.iter().map(String::as_str))
        .collect();
    let missing: Vec<&&str> = public.iter().filter(|n| sym(n).is_null()).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
}

#[test]
fn dlvsym_finds_every_version_and_dlsym_the_default_one() {
    for e in exports() {
        let p = vsym(&e.name, &e.version);
        assert!(!p.is_null(), "dlvsym({}, {})", e.name, e.version);
        if e.default {
            assert_eq!(sym(&e.name), p, "{} is the default", e.versioned_name());
        }
    }
    assert!(
        vsym("ibv_get_device_list", "IBVERBS_1.1") != vsym("ibv_get_device_list", "IBVERBS_1.0")
    );
    assert!(vsym("ibv_get_device_list", "IBVERBS_1.2").is_null());
    assert!(vsym("ibv_qp_to_qp_ex", "IBVERBS_1.1").is_null());
}

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type CloseDevice = unsafe extern "C" fn(*mut c_void) -> c_int;
type QueryGidType = unsafe extern "C" fn(*mut c_void, u8, u32, *mut u32) -> c_int;
type ErrnoStub = unsafe extern "C" fn(*mut c_void) -> c_int;

/// Resolves a versioned function.
///
/// # Safety
/// `F` is the function's C prototype.
unsafe fn func<F: Copy>(name: &str, version: &str) -> F {
    let p = vsym(name, version);
    assert!(!p.is_null(), "{name}@{version}");
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: a function pointer of the prototype the caller names.
    unsafe { std::mem::transmute_copy(&p) }
}

#[test]
fn version_1_0_entries_fail_cleanly_and_1_1_works() {
    // SAFETY: libibverbs' prototypes.
    unsafe {
        let old: GetDeviceList = func("ibv_get_device_list", "IBVERBS_1.0");
        let mut n: c_int = -1;
        set_errno(0);
        assert!(old(&mut n).is_null());
        assert_eq!((errno(), n), (libc::EOPNOTSUPP, -1));
        let old_free: FreeDeviceList = func("ibv_free_device_list", "IBVERBS_1.0");
        old_free(std::ptr::null_mut());
        let old_close: CloseDevice = func("ibv_close_device", "IBVERBS_1.0");
        assert_eq!(old_close(std::ptr::null_mut()), libc::EOPNOTSUPP);

        let list: GetDeviceList = func("ibv_get_device_list", "IBVERBS_1.1");
        let devs = list(&mut n);
        assert!(!devs.is_null() && n >= 2);
        let name: unsafe extern "C" fn(*mut c_void) -> *const c_char =
            func("ibv_get_device_name", "IBVERBS_1.1");
        assert_eq!(CStr::from_ptr(name(*devs)).to_str().unwrap(), "soft0");
        let free: FreeDeviceList = func("ibv_free_device_list", "IBVERBS_1.1");
        free(devs);
    }
}

#[test]
fn private_entries_run_the_function_or_fail_cleanly() {
    // SAFETY: libibverbs' prototypes; the context is opened and closed once.
    unsafe {
        let list: GetDeviceList = func("ibv_get_device_list", "IBVERBS_1.1");
        let free: FreeDeviceList = func("ibv_free_device_list", "IBVERBS_1.1");
        let open: OpenDevice = func("ibv_open_device", "IBVERBS_1.1");
        let close: CloseDevice = func("ibv_close_device", "IBVERBS_1.1");
        let devs = list(std::ptr::null_mut());
        let ctx = open(*devs.add(1));
        free(devs);
        assert!(!ctx.is_null());
        // The same function under rdma-core 44's and 64's private versions.
        for v in ["IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_64"] {
            let gid_type: QueryGidType = func("ibv_query_gid_type", v);
            let mut t = 9;
            assert_eq!(gid_type(ctx, 1, 0, &mut t), 0, "{v}");
            assert_eq!(t, 0, "IBV_GID_TYPE_SYSFS_IB_ROCE_V1 under {v}");
            assert_eq!(gid_type(ctx, 1, 5, &mut t), -1, "{v}");
        }
        assert_eq!(close(ctx), 0);

        let destroy_cq: ErrnoStub = func("ibv_cmd_destroy_cq", "IBVERBS_PRIVATE_34");
        assert_eq!(destroy_cq(std::ptr::null_mut()), libc::EOPNOTSUPP);
        let open_device: OpenDevice = func("verbs_open_device", "IBVERBS_PRIVATE_64");
        set_errno(0);
        assert!(open_device(std::ptr::null_mut()).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        let flag = vsym("verbs_allow_disassociate_destroy", "IBVERBS_PRIVATE_34");
        assert_eq!(*flag.cast::<u8>(), 0);
    }
}
