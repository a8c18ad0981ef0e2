//! The adaptive policy over the simulated NIC with rate-limited paths: four data QPs
//! whose send queues run at most a few WQEs per tick, one of them slowed and then
//! recovered. Under last-of-chain and every-WQE signaling and at send-queue depths of
//! 4, 16, 32 and 64 WQEs, each QP's share of the WQEs must follow the rates: the slowed QP close to
//! its rate's share while slow, every QP close to an even share once it recovered.

mod common;

use common::{pair_with, Pair};
use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Mode, Opcode, Policy, PostSendError, SendWr, Signaling};
use vqp_sim::NicConfig;

const QPS: usize = 4;
/// Fragment size: small, so that a debug build runs many ticks quickly.
const FRAG: u32 = 4096;
/// A request: 16 fragments.
const REQ: u64 = 16 * FRAG as u64;
/// What one tick stands for on the adaptive policy's clock.
const TICK_NS: u64 = 10_000;
/// WQEs per tick of a QP at full speed, and of the slowed one.
const FAST: u32 = 4;
const SLOW: u32 = 1;
/// The slowed QP.
const SLOWED: usize = 1;
/// Room for send WQEs per data QP: the deepest `max_outstanding` tested.
const ROOM: usize = 64;

/// Ticks per phase, and how many at the end of a phase are measured.
const PHASE: u64 = 600;
const MEASURED: u64 = 200;

/// Each data QP's share of the WQEs its link ran over the last `MEASURED` ticks of
/// the slowed phase and of the recovered one.
#[derive(Debug)]
struct Shares {
    slowed: [f64; QPS],
    recovered: [f64; QPS],
}

/// Run one tick: sample, post requests until the virtual QP refuses for
/// backpressure, let each link run its rate, and poll until nothing is left.
fn tick(p: &mut Pair<ROOM>, now: &mut u64, next: &mut u64) {
    *now += TICK_NS;
    p.a.vqp.sample(*now);
    let keys = p.a.keys(&p.b);
    loop {
        let wr = SendWr::new(*next, Opcode::RDMA_WRITE, p.a.buf, REQ, p.b.buf, keys);
        match p.a.vqp.post_send(&wr) {
            Ok(()) => *next += 1,
            Err(PostSendError::Full) => break,
            Err(e) => panic!("request refused: {e}"),
        }
    }
    p.nic.tick();
    let mut wcs = Vec::new();
    loop {
        let before = wcs.len();
        p.a.poll(&mut wcs);
        if wcs.len() == before {
            break;
        }
    }
    assert!(
        wcs.iter().all(|w| w.status.is_ok()),
        "a request failed: {wcs:?}"
    );
    assert!(p.a.vqp.failure().is_none());
}

/// WQEs each data QP's link ran so far.
fn executed(p: &Pair<ROOM>) -> [u64; QPS] {
    core::array::from_fn(|i| {
        let qpn = p.a.vqp.data_qp_num(i).expect("data QP");
        p.nic.qp_stats(qpn).expect("QP").executed
    })
}

fn shares(from: [u64; QPS], to: [u64; QPS]) -> [f64; QPS] {
    let ran: [u64; QPS] = core::array::from_fn(|i| to[i] - from[i]);
    let total: u64 = ran.iter().sum();
    assert!(total > 0, "nothing ran");
    ran.map(|r| r as f64 / total as f64)
}

/// Ticks `PHASE` times and returns the shares over the last `MEASURED` ticks.
fn phase(p: &mut Pair<ROOM>, now: &mut u64, next: &mut u64) -> [f64; QPS] {
    for _ in 0..PHASE - MEASURED {
        tick(p, now, next);
    }
    let from = executed(p);
    for _ in 0..MEASURED {
        tick(p, now, next);
    }
    shares(from, executed(p))
}

fn run(signaling: Signaling, max_outstanding: u32) -> Shares {
    let cfg = Config {
        split: SplitPolicy::new(FRAG),
        max_outstanding,
        signaling,
        policy: Policy::Adaptive,
        // Re-weigh every 8 ticks.
        adapt_ns: 8 * TICK_NS,
        ..Config::new(Mode::Dqplb)
    };
    let mut p = pair_with::<ROOM>(NicConfig::default(), cfg, QPS as u32, REQ as usize);
    let qpn = |p: &Pair<ROOM>, i: usize| p.a.vqp.data_qp_num(i).expect("data QP");
    for i in 0..QPS {
        p.nic.set_send_rate(qpn(&p, i), Some(FAST)).expect("QP");
    }
    let (mut now, mut next) = (0, 0);
    // Every link at full speed first.
    phase(&mut p, &mut now, &mut next);
    p.nic
        .set_send_rate(qpn(&p, SLOWED), Some(SLOW))
        .expect("QP");
    let slowed = phase(&mut p, &mut now, &mut next);
    p.nic
        .set_send_rate(qpn(&p, SLOWED), Some(FAST))
        .expect("QP");
    let recovered = phase(&mut p, &mut now, &mut next);
    Shares { slowed, recovered }
}

/// Within 5 percentage points.
const CLOSE: f64 = 0.05;

fn check(signaling: Signaling, max_outstanding: u32) {
    let s = run(signaling, max_outstanding);
    let what = format!("{signaling:?}, max_outstanding {max_outstanding}: {s:.3?}");
    eprintln!("{what}");
    // While slowed, the QP's share is its rate's share of the links' sum.
    let slow_share = f64::from(SLOW) / f64::from(SLOW + (QPS as u32 - 1) * FAST);
    assert!(
        (s.slowed[SLOWED] - slow_share).abs() <= CLOSE,
        "slowed QP's share {:.3} is not near {slow_share:.3}; {what}",
        s.slowed[SLOWED]
    );
    // Recovered, every QP is back near an even share.
    for (i, &share) in s.recovered.iter().enumerate() {
        assert!(
            (share - 1.0 / QPS as f64).abs() <= CLOSE,
            "QP {i}'s share {share:.3} after the recovery is not near {:.3}; {what}",
            1.0 / QPS as f64
        );
    }
}

#[test]
fn last_of_chain_depth_4() {
    check(Signaling::LastOfChain, 4);
}

#[test]
fn last_of_chain_depth_16() {
    check(Signaling::LastOfChain, 16);
}

#[test]
fn last_of_chain_depth_32() {
    check(Signaling::LastOfChain, 32);
}

#[test]
fn last_of_chain_depth_64() {
    check(Signaling::LastOfChain, 64);
}

#[test]
fn every_wqe_depth_4() {
    check(Signaling::Every, 4);
}

#[test]
fn every_wqe_depth_16() {
    check(Signaling::Every, 16);
}

#[test]
fn every_wqe_depth_32() {
    check(Signaling::Every, 32);
}

#[test]
fn every_wqe_depth_64() {
    check(Signaling::Every, 64);
}
