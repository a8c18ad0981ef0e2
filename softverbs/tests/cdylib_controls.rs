//! The `vqp_soft_*` C controls, resolved with `dlsym` from the `dlopen`ed cdylib, act on
//! the loaded copy of the provider (and not on the copy linked into this binary).
//!
//! One test function: the controls are process-wide (a link taken down would break a
//! connection another test runs at the same time).

mod common;

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use vqp_host::sys::*;
use vqp_host::{Verbs, WcStatus};
use vqp_softverbs::{Reorder, VQP_SOFT_REORDER_ADVERSARIAL, VQP_SOFT_REORDER_RANDOM};

fn cdylib() -> PathBuf {
    vqp_softverbs::find_cdylib().unwrap_or_else(|| {
        panic!(
            "the cdylib was not built; looked at {:?}",
            vqp_softverbs::cdylib_candidates()
        )
    })
}

type SetReorder = extern "C" fn(c_int, u64) -> c_int;
type FailQpAfter = extern "C" fn(u32, u64);
type DelayQp = extern "C" fn(u32, u64);
type ClearFaults = extern "C" fn();
type SetLink = extern "C" fn(u32, c_int) -> c_int;
type SetRate = extern "C" fn(u32, u64) -> c_int;

/// The loaded library's controls.
struct Controls {
    set_reorder: SetReorder,
    fail_qp_after: FailQpAfter,
    delay_qp: DelayQp,
    clear_faults: ClearFaults,
    set_link: SetLink,
    set_rate: SetRate,
}

impl Controls {
    fn resolve(verbs: &Verbs) -> Controls {
        let sym = |name: &str| {
            verbs
                .symbol(name)
                .unwrap_or_else(|| panic!("{name} is not exported"))
        };
        let p = |name: &str| sym(name).as_ptr();
        Controls {
            // SAFETY: the provider's export of this name, defined in `abi/faults.rs`
            // with exactly this prototype; `verbs` keeps the library loaded meanwhile.
            set_reorder: unsafe {
                std::mem::transmute::<*mut c_void, SetReorder>(p("vqp_soft_set_reorder"))
            },
            // SAFETY: as above, for `vqp_soft_fail_qp_after`.
            fail_qp_after: unsafe {
                std::mem::transmute::<*mut c_void, FailQpAfter>(p("vqp_soft_fail_qp_after"))
            },
            // SAFETY: as above, for `vqp_soft_delay_qp`.
            delay_qp: unsafe {
                std::mem::transmute::<*mut c_void, DelayQp>(p("vqp_soft_delay_qp"))
            },
            // SAFETY: as above, for `vqp_soft_clear_faults`.
            clear_faults: unsafe {
                std::mem::transmute::<*mut c_void, ClearFaults>(p("vqp_soft_clear_faults"))
            },
            // SAFETY: as above, for `vqp_soft_set_link`.
            set_link: unsafe {
                std::mem::transmute::<*mut c_void, SetLink>(p("vqp_soft_set_link"))
            },
            // SAFETY: as above, for `vqp_soft_set_rate`.
            set_rate: unsafe {
                std::mem::transmute::<*mut c_void, SetRate>(p("vqp_soft_set_rate"))
            },
        }
    }
}

/// Posts one signaled 64-byte RDMA WRITE from `a` to `b` and returns its completion.
fn write_once(a: &Side, b: &Side, wr_id: u64) -> vqp_host::Wc {
    let mut sge = a.mr.sge(0, 64).unwrap();
    let mut wr = send_wr(wr_id, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut wr, &b.mr, 0);
    post(a, &mut wr);
    poll_n(&a.cq, 1)[0]
}

#[test]
fn c_controls_reach_the_loaded_provider() {
    // SAFETY: the library implements the libibverbs ABI.
    let verbs = unsafe { Verbs::load_from(&cdylib()) }.expect("dlopen the provider");
    assert!(verbs.symbol("vqp_soft_no_such_control").is_none());
    assert!(verbs.symbol("vqp_soft\0set_reorder").is_none());
    assert!(
        common::verbs().symbol("vqp_soft_set_reorder").is_none(),
        "an in-process table has no library to look in"
    );
    let c = Controls::resolve(&verbs);

    // Reorder: codes checked; the copy linked into this binary is not the one changed.
    let linked_before = vqp_softverbs::reorder();
    assert_eq!((c.set_reorder)(7, 0), libc::EINVAL);
    assert_eq!((c.set_reorder)(VQP_SOFT_REORDER_RANDOM, 42), 0);
    assert_eq!((c.set_reorder)(VQP_SOFT_REORDER_ADVERSARIAL, 0), 0);
    assert_eq!(vqp_softverbs::reorder(), linked_before);
    assert_ne!(linked_before, Reorder::Adversarial);

    let (a, b) = pair(&verbs);
    assert!(write_once(&a, &b, 1).is_ok());

    // A QP failing after one more WQE: success, then the error, then flushes.
    (c.fail_qp_after)(a.qp.qp_num(), 1);
    let mut sges: Vec<_> = (0..3).map(|i| a.mr.sge(i * 64, 64).unwrap()).collect();
    for (i, sge) in sges.iter_mut().enumerate() {
        let mut wr = send_wr(10 + i as u64, IBV_WR_RDMA_WRITE, std::slice::from_mut(sge));
        rdma(&mut wr, &b.mr, i as u64 * 64);
        post(&a, &mut wr);
    }
    let wcs = poll_n(&a.cq, 3);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id(), w.status())).collect();
    assert_eq!(
        got,
        [
            (10, WcStatus::Success),
            (11, WcStatus::RetryExcErr),
            (12, WcStatus::WrFlushErr)
        ]
    );

    // A rule cleared before it fires does nothing.
    let (a, b) = pair(&verbs);
    (c.fail_qp_after)(a.qp.qp_num(), 0);
    (c.clear_faults)();
    assert!(write_once(&a, &b, 2).is_ok());

    // A delay holds each WQE back at least that long.
    (c.delay_qp)(a.qp.qp_num(), 30_000);
    let t = Instant::now();
    assert!(write_once(&a, &b, 3).is_ok());
    assert!(
        t.elapsed() >= Duration::from_millis(30),
        "{:?}",
        t.elapsed()
    );
    (c.clear_faults)();

    // A link down fails the WQE; an unknown device is refused.
    assert_eq!((c.set_link)(99, 0), libc::EINVAL);
    assert_eq!((c.set_link)(1, 0), 0);
    assert_eq!(write_once(&a, &b, 4).status(), WcStatus::RetryExcErr);
    assert_eq!((c.set_link)(1, 1), 0);
    let (a, b) = pair(&verbs);
    assert!(write_once(&a, &b, 5).is_ok(), "the link is back up");

    // A rated link paces completions: 64 bytes at 1 kB/s take 64 ms.
    assert_eq!((c.set_rate)(99, 1), libc::EINVAL);
    assert_eq!((c.set_rate)(0, 1000), 0);
    let t = Instant::now();
    assert!(write_once(&a, &b, 6).is_ok());
    assert!(
        t.elapsed() >= Duration::from_millis(60),
        "{:?}",
        t.elapsed()
    );
    // The rated port reports it: 1 kB/s is below 1X SDR (1, 1), the slowest link.
    let port = a.ctx.query_port(1).unwrap();
    assert_eq!((port.active_width(), port.active_speed()), (1, 1));
    assert_eq!((c.set_rate)(0, 0), 0);
    let port = a.ctx.query_port(1).unwrap();
    assert_eq!(
        (port.active_width(), port.active_speed()),
        (2, 32),
        "4X EDR"
    );
    assert_eq!((c.set_reorder)(0, 0), 0);
}
