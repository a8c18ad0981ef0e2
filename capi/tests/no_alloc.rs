//! After set-up and warm-up, the C API's data path allocates nothing: `vqp_post_send`,
//! `vqp_post_recv` and `vqp_poll` on a connected endpoint, and `vqp_app_send`,
//! `vqp_app_recv` and `vqp_app_poll` through a poll thread (whose own thread is
//! counted too).
//!
//! A counting global allocator counts every allocation of this process's Rust code —
//! the C API, vqp-host and vqp-core, linked in here — while the measured loops run.
//! The provider, softverbs, is loaded with `dlopen` as its own cdylib and allocates
//! through its own copy of the standard library, which this counter does not see: what
//! is measured is vqp's share. This file holds one test, so no other test allocates
//! meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use vqp_capi::data::{vqp_poll, vqp_post_recv, vqp_post_send};
use vqp_capi::device::{vqp_device_close, vqp_device_open};
use vqp_capi::endpoint::{
    vqp_endpoint_card, vqp_endpoint_connect, vqp_endpoint_create, vqp_endpoint_destroy,
    vqp_settings_init,
};
use vqp_capi::mr::{vqp_mr_deregister, vqp_mr_query, vqp_mr_register};
use vqp_capi::poller::{
    vqp_app, vqp_app_poll, vqp_app_recv, vqp_app_send, vqp_app_stop, vqp_endpoint_start_poller,
    vqp_event, vqp_poller_config, vqp_poller_config_init, VQP_EVENT_COMPLETED, VQP_IDLE_YIELD,
};
use vqp_capi::status::vqp_status::{self, VQP_ERR_FULL, VQP_OK};
use vqp_capi::types::*;

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds the contract;
// the counter is an atomic that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded: `ptr` came from `alloc` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn ok(st: vqp_status, what: &str) {
    assert_eq!(st, VQP_OK, "{what}");
}

/// Allocations made by `f`.
fn count(f: impl FnOnce()) -> u64 {
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    f();
    COUNTING.store(false, Ordering::SeqCst);
    ALLOCS.load(Ordering::SeqCst)
}

const LEN: usize = 4096;

#[test]
fn the_data_path_allocates_nothing() {
    // Connecting builds the virtual QP (about 270 KB) on the caller's stack, several
    // times over in an unoptimised build: more than a test thread's 2 MiB. C threads
    // get 8 MiB by default; give this one as much.
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(measure)
        .expect("a thread")
        .join()
        .expect("the measurement passed");
}

fn measure() {
    let lib = vqp_softverbs::find_cdylib().expect("the softverbs cdylib (a dev-dependency)");
    let ns = std::env::temp_dir().join(format!("vqp-capi-no-alloc-{}", std::process::id()));
    std::env::set_var("VQP_SOFT_DIR", &ns);
    let lib = CString::new(lib.into_os_string().into_encoded_bytes()).unwrap();
    let (s0, s1) = (
        CString::new("soft0").unwrap(),
        CString::new("soft1").unwrap(),
    );
    let (mut d0, mut d1) = (vqp_device::default(), vqp_device::default());
    // SAFETY: valid strings and out-pointers; the library is softverbs' libibverbs ABI.
    unsafe {
        ok(
            vqp_device_open(lib.as_ptr(), s0.as_ptr(), &mut d0),
            "open soft0",
        );
        ok(
            vqp_device_open(lib.as_ptr(), s1.as_ptr(), &mut d1),
            "open soft1",
        );
    }
    let mut src = vec![7u8; LEN];
    let mut dst = vec![0u8; LEN];
    let (mut sm, mut dm) = (vqp_mr::default(), vqp_mr::default());
    let (mut si, mut di) = (vqp_mr_info::default(), vqp_mr_info::default());
    // SAFETY: the buffers outlive the regions (deregistered below, before they drop).
    unsafe {
        ok(
            vqp_mr_register(d0, src.as_mut_ptr(), LEN, VQP_ACCESS_LOCAL_WRITE, &mut sm),
            "reg",
        );
        ok(
            vqp_mr_register(
                d1,
                dst.as_mut_ptr(),
                LEN,
                VQP_ACCESS_LOCAL_WRITE | VQP_ACCESS_REMOTE_WRITE,
                &mut dm,
            ),
            "reg",
        );
        ok(vqp_mr_query(sm, &mut si), "query");
        ok(vqp_mr_query(dm, &mut di), "query");
    }
    let mut s = std::mem::MaybeUninit::<vqp_settings>::uninit();
    // SAFETY: writable for its size.
    ok(
        unsafe { vqp_settings_init(s.as_mut_ptr(), std::mem::size_of::<vqp_settings>()) },
        "settings",
    );
    // SAFETY: initialised by the call above.
    let mut s = unsafe { s.assume_init() };
    s.mode = VQP_MODE_SPRAY;
    let pair = |s: &vqp_settings| {
        let (mut a, mut b) = (vqp_endpoint::default(), vqp_endpoint::default());
        let (mut ca, mut cb) = ([0u8; VQP_CARD_MAX as usize], [0u8; VQP_CARD_MAX as usize]);
        let (mut la, mut lb) = (0usize, 0usize);
        // SAFETY: valid handles, buffers and out-pointers.
        unsafe {
            ok(vqp_endpoint_create(&d0, 1, s, &mut a), "create");
            ok(vqp_endpoint_create(&d1, 1, s, &mut b), "create");
            ok(
                vqp_endpoint_card(a, ca.as_mut_ptr(), ca.len(), &mut la),
                "card",
            );
            ok(
                vqp_endpoint_card(b, cb.as_mut_ptr(), cb.len(), &mut lb),
                "card",
            );
            ok(vqp_endpoint_connect(a, cb.as_ptr(), lb), "connect");
            ok(vqp_endpoint_connect(b, ca.as_ptr(), la), "connect");
        }
        (a, b)
    };
    let mut w = vqp_send_wr {
        wr_id: 0,
        opcode: VQP_WR_RDMA_WRITE_WITH_IMM,
        flags: VQP_SEND_SIGNALED,
        local_addr: si.addr,
        len: LEN as u64,
        remote_addr: di.addr,
        imm_data: 0x55,
        key_mask: 1,
        ..Default::default()
    };
    w.keys[0] = vqp_keys {
        lkey: si.lkey,
        rkey: di.rkey,
    };

    // Direct: a notification receive, a write with immediate, both completions.
    let (a, b) = pair(&s);
    let round = |i: u64| {
        let r = vqp_recv_wr {
            wr_id: i,
            ..Default::default()
        };
        let wr = vqp_send_wr { wr_id: i, ..w };
        let mut wc = [vqp_wc::default(); 8];
        let (mut n, mut sent, mut landed) = (0u32, false, false);
        // SAFETY: live handles, readable requests, a writable array of 8.
        unsafe {
            ok(vqp_post_recv(b, &r), "post_recv");
            ok(vqp_post_send(a, &wr), "post_send");
            while !(sent && landed) {
                ok(vqp_poll(a, wc.as_mut_ptr(), 8, &mut n), "poll");
                sent |= n > 0;
                assert!(wc[..n as usize].iter().all(|c| c.status == VQP_WC_SUCCESS));
                ok(vqp_poll(b, wc.as_mut_ptr(), 8, &mut n), "poll");
                landed |= n > 0;
                assert!(wc[..n as usize].iter().all(|c| c.imm_data == 0x55));
            }
        }
    };
    for i in 0..200 {
        round(i);
    }
    let direct = count(|| (200..2200).for_each(round));
    assert_eq!(dst, src);

    // Through poll threads: the same requests submitted to the rings.
    let (pa, pb) = pair(&s);
    let mut pc = std::mem::MaybeUninit::<vqp_poller_config>::uninit();
    // SAFETY: writable for its size.
    ok(
        unsafe {
            vqp_poller_config_init(pc.as_mut_ptr(), std::mem::size_of::<vqp_poller_config>())
        },
        "poller config",
    );
    // SAFETY: initialised by the call above.
    let mut pc = unsafe { pc.assume_init() };
    pc.idle = VQP_IDLE_YIELD;
    let (mut app_a, mut app_b) = (vqp_app::default(), vqp_app::default());
    // SAFETY: connected endpoints, a valid config, writable out-pointers.
    unsafe {
        ok(vqp_endpoint_start_poller(pa, &pc, &mut app_a), "start");
        ok(vqp_endpoint_start_poller(pb, &pc, &mut app_b), "start");
    }
    let app_round = |i: u64| {
        let r = vqp_recv_wr {
            wr_id: i,
            ..Default::default()
        };
        let wr = vqp_send_wr { wr_id: i, ..w };
        let mut ev = [vqp_event::default(); 8];
        let (mut n, mut sent, mut landed) = (0u32, false, false);
        // SAFETY: live app handles, readable requests, a writable array of 8.
        unsafe {
            ok(vqp_app_recv(app_b, &r), "app_recv");
            loop {
                match vqp_app_send(app_a, &wr) {
                    VQP_OK => break,
                    VQP_ERR_FULL => std::thread::yield_now(),
                    e => panic!("app_send: {e:?}"),
                }
            }
            while !(sent && landed) {
                ok(vqp_app_poll(app_a, ev.as_mut_ptr(), 8, &mut n), "app_poll");
                sent |= n > 0;
                assert!(ev[..n as usize]
                    .iter()
                    .all(|e| e.kind == VQP_EVENT_COMPLETED));
                ok(vqp_app_poll(app_b, ev.as_mut_ptr(), 8, &mut n), "app_poll");
                landed |= n > 0;
                std::thread::yield_now();
            }
        }
    };
    for i in 0..200 {
        app_round(i);
    }
    let threaded = count(|| (200..1200).for_each(app_round));

    // SAFETY: live handles, destroyed once each.
    unsafe {
        ok(vqp_app_stop(app_a, 1000, 0, std::ptr::null_mut()), "stop");
        ok(vqp_app_stop(app_b, 1000, 0, std::ptr::null_mut()), "stop");
        for ep in [a, b, pa, pb] {
            ok(vqp_endpoint_destroy(ep), "destroy");
        }
        ok(vqp_mr_deregister(sm), "dereg");
        ok(vqp_mr_deregister(dm), "dereg");
        ok(vqp_device_close(d0), "close");
        ok(vqp_device_close(d1), "close");
    }
    let _ = std::fs::remove_dir_all(&ns);
    assert_eq!(direct, 0, "allocations in 2000 direct round trips");
    assert_eq!(
        threaded, 0,
        "allocations in 1000 round trips through poll threads"
    );
}
