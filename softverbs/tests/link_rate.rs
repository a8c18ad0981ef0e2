//! Link rates: a rated port delays when a WQE completes to when its bytes would have
//! crossed the link, shared by every QP of the device; changing the rate takes effect
//! for what comes next. Lower bounds only (a busy machine is slower, never faster).
//!
//! A rated port also reports its rate: `ibv_query_port` gives the InfiniBand width and
//! lane speed nearest to it, and sysfs `rate` agrees; `ibv_query_port_speed` gives the
//! link's effective bandwidth, its rate.
//!
//! Rates are process-wide, so each test owns one device's rate: the pacing test soft0's
//! (its soft1 QPs only answer, and a link shapes the WQEs of its requester), the port
//! test soft1's.

mod common;

use std::ffi::CStr;
use std::time::{Duration, Instant};

use common::*;
use vqp_host::sys::*;
use vqp_host::Context;

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

/// `(active_width, active_speed)` of `ctx`'s port as `ibv_query_port` reports it.
fn width_speed(ctx: &Context) -> (u8, u32) {
    let port = ctx.query_port(1).unwrap();
    (port.active_width(), port.active_speed())
}

/// `ibv_query_port_speed` of `ctx`'s port, in units of 100 Mb/s.
fn port_speed(ctx: &Context) -> u64 {
    let mut speed = 0u64;
    // SAFETY: a live context of the provider; `speed` is writable.
    let rc = unsafe { vqp_softverbs::ibv_query_port_speed(ctx.as_raw(), 1, &mut speed) };
    assert_eq!(rc, 0);
    speed
}

/// Device `dev`'s sysfs `ports/1/rate`, as `ibv_read_sysfs_file` reads it.
fn sysfs_rate(dev: &str) -> String {
    let dir = std::ffi::CString::new(format!("/sys/class/infiniband/{dev}")).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: NUL-terminated strings; `buf` is writable for its length.
    let n = unsafe {
        vqp_softverbs::ibv_read_sysfs_file(
            dir.as_ptr(),
            c"ports/1/rate".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert!(n > 0, "{n}");
    CStr::from_bytes_until_nul(&buf)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_rated_port_reports_the_nearest_width_and_speed() {
    let v = verbs();
    let ctx = Context::open(&v, Some("soft1")).unwrap();
    assert_eq!(vqp_softverbs::rate(1), Some(0), "unlimited by default");
    // Unlimited: 4X (2) EDR (32), 100 Gb/s.
    assert_eq!(width_speed(&ctx), (2, 32));
    assert_eq!(port_speed(&ctx), 1000);
    assert_eq!(sysfs_rate("soft1"), "100 Gb/sec (4X EDR)");

    // 1 GB/s = 8 Gb/s: 4X (2) SDR (1), 10 Gb/s.
    vqp_softverbs::set_rate(1, 1_000_000_000).unwrap();
    assert_eq!(width_speed(&ctx), (2, 1));
    assert_eq!(port_speed(&ctx), 80);
    assert_eq!(sysfs_rate("soft1"), "10 Gb/sec (4X SDR)");

    // Changed at run time, seen by the next query, on an open context: 3 GB/s = 24 Gb/s
    // is 1X (1) EDR (32), 25 Gb/s.
    vqp_softverbs::set_rate(1, 3_000_000_000).unwrap();
    assert_eq!(width_speed(&ctx), (1, 32));
    assert_eq!(port_speed(&ctx), 240);
    assert_eq!(sysfs_rate("soft1"), "25 Gb/sec (1X EDR)");

    // 100 MB/s is below the slowest link there is: 1X SDR, 2.5 Gb/s.
    vqp_softverbs::set_rate(1, 100_000_000).unwrap();
    assert_eq!(width_speed(&ctx), (1, 1));
    assert_eq!(port_speed(&ctx), 8);
    assert_eq!(sysfs_rate("soft1"), "2.5 Gb/sec (1X SDR)");

    // 0 makes it 4X EDR again.
    vqp_softverbs::set_rate(1, 0).unwrap();
    assert_eq!(width_speed(&ctx), (2, 32));
    assert_eq!(port_speed(&ctx), 1000);
}
