//! Link rates: a rated port delays when a WQE completes to when its bytes would have
//! crossed the link, shared by every QP of the device; changing the rate takes effect
//! for what comes next. Lower bounds only (a busy machine is slower, never faster).
//!
//! One test: the rates are process-wide.

mod common;

use std::time::{Duration, Instant};

use common::*;
use vqp_host::sys::*;

const MIB: usize = 1 << 20;

/// Posts `n` 1 MiB writes from `a` to `b` (the last one signaled) and waits for them.
fn writes(a: &Side, b: &Side, n: usize, first_id: u64) {
    for i in 0..n {
        let mut sge = a.mr.sge(i * MIB, MIB).unwrap();
        let mut wr = send_wr(
            first_id + i as u64,
            IBV_WR_RDMA_WRITE,
            std::slice::from_mut(&mut sge),
        );
        wr.send_flags = if i + 1 == n { IBV_SEND_SIGNALED } else { 0 };
        rdma(&mut wr, &b.mr, (i * MIB) as u64);
        post(a, &mut wr);
    }
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok(), "{:?}", wc[0]);
}

#[test]
fn a_rated_link_paces_completions_and_its_qps_share_it() {
    let v = verbs();
    let o = Opts {
        buf: 8 * MIB,
        ..Opts::default()
    };
    let (mut a, b) = pair_with(&v, &o);
    let (c, d) = pair_with(&v, &o);
    fill(&mut a, 7);
    assert_eq!(vqp_softverbs::rate(0), Some(0), "unlimited by default");
    assert!(vqp_softverbs::set_rate(99, 1).is_err());

    // 100 MB/s: 8 MiB cannot complete in less than about 84 ms.
    vqp_softverbs::set_rate(0, 100_000_000).unwrap();
    assert_eq!(vqp_softverbs::rate(0), Some(100_000_000));
    let t = Instant::now();
    writes(&a, &b, 8, 0);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(80),
        "8 MiB in {took:?} at 100 MB/s"
    );
    assert_eq!(
        bytes(&b)[..8 * MIB],
        bytes(&a)[..8 * MIB],
        "the data arrived whole"
    );

    // Two QPs on the device share the link: 4 MiB each still take the time of 8.
    let t = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| writes(&a, &b, 4, 100));
        s.spawn(|| writes(&c, &d, 4, 200));
    });
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(80),
        "2 × 4 MiB in {took:?} at 100 MB/s"
    );

    // A lower rate takes effect for what comes next; 0 removes the limit.
    vqp_softverbs::set_rate(0, 20_000_000).unwrap();
    let t = Instant::now();
    writes(&a, &b, 2, 300);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(100),
        "2 MiB in {took:?} at 20 MB/s"
    );
    vqp_softverbs::set_rate(0, 0).unwrap();
    writes(&a, &b, 2, 400);
}
