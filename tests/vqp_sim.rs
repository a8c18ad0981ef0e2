//! End-to-end behaviour of the virtual QP over the simulated NIC: random sizes, QP
//! counts, fragment sizes, cross-QP orders and QP failures.

mod common;

use common::{pair, pattern, Pair};
use proptest::prelude::*;
use vqp_core::split::SplitPolicy;
use vqp_core::{
    Config, Mode, Opcode, Policy, PostSendError, RecvWr, SendFlags, SendWr, Signaling, Wc,
    WcOpcode, WcStatus,
};
use vqp_sim::{NicConfig, ReorderPolicy};

#[derive(Clone, Copy, Debug)]
struct Req {
    op: Opcode,
    off: u64,
    len: u64,
    imm: u32,
}

impl Req {
    /// What a FETCH_AND_ADD adds to its counter: never 0.
    fn addend(&self) -> u64 {
        u64::from(self.imm) + 1
    }
}

/// Room past the data areas for the atomics' counters, 8 bytes each.
const ATOMICS: usize = 4096;

/// What a test run observed.
struct Outcome {
    sends: Vec<Wc>,
    recvs: Vec<Wc>,
    posted: Vec<Req>,
}

/// Post `reqs` (retrying on backpressure) and drive the NIC until every accepted
/// request completed on the sender. Stops posting once the virtual QP failed.
fn run(p: &mut Pair, reqs: &[Req], steps: u64, fail_back: bool) -> Outcome {
    let mut sends = Vec::new();
    let mut recvs = Vec::new();
    let mut posted = Vec::new();
    let keys = p.a.keys(&p.b);
    let mut next = 0;
    // The request whose receive is posted (a request refused for backpressure is
    // posted again; its receive stays).
    let mut received = None;
    let mut idle_rounds = 0;
    // The adaptive policy's clock: each round stands for `steps` NIC steps of 10 µs.
    let mut now = 0;
    loop {
        now += steps * 10_000;
        p.a.vqp.sample(now);
        while next < reqs.len() {
            let r = reqs[next];
            let recv = match r.op {
                Opcode::RDMA_WRITE_WITH_IMM => Some(RecvWr::notification(next as u64)),
                // Into the receiver's buffer where a write would have put it.
                Opcode::SEND | Opcode::SEND_WITH_IMM => Some(RecvWr::data(
                    next as u64,
                    p.b.buf + r.off,
                    r.len as u32,
                    p.b.mrs[0].lkey,
                )),
                _ => None,
            };
            if let Some(recv) = recv.filter(|_| received != Some(next)) {
                match p.b.vqp.post_recv(&recv) {
                    Ok(()) => received = Some(next),
                    Err(_) => break,
                }
            }
            let mut wr = SendWr::new(
                next as u64,
                r.op,
                p.a.buf + r.off,
                r.len,
                p.b.buf + r.off,
                keys,
            )
            .imm(r.imm);
            if r.op == Opcode::ATOMIC_FETCH_AND_ADD {
                wr.compare_add = r.addend();
            }
            match p.a.vqp.post_send(&wr) {
                Ok(()) => {
                    posted.push(r);
                    next += 1;
                }
                Err(PostSendError::Full) => break,
                Err(PostSendError::Failed(_)) => {
                    next = reqs.len();
                }
                Err(e) => panic!("valid request refused: {e}"),
            }
        }
        let ran = p.nic.run_for(steps);
        let before = (sends.len(), recvs.len());
        p.a.poll(&mut sends);
        p.b.poll(&mut recvs);
        if fail_back {
            for i in 0..p.a.vqp.data_qps() {
                if p.a.vqp.data_qp_failed(i) || p.b.vqp.data_qp_failed(i) {
                    p.fail_back(i);
                }
            }
            if p.a.vqp.notify_qp_failed() || p.b.vqp.notify_qp_failed() {
                p.fail_back_notify();
            }
        }
        if next == reqs.len() && sends.len() == posted.len() {
            // Let the receiver see everything that landed.
            let devices = p.nic.config().devices as u8;
            for round in 0.. {
                let ran = p.nic.run();
                p.b.poll(&mut recvs);
                let queued = (0..devices)
                    .filter_map(|d| p.b.vcq.cq_mut(d).map(|c| c.len()))
                    .sum::<usize>();
                if queued == 0 && (p.nic.is_idle() || ran == 0) {
                    break;
                }
                assert!(
                    round < 1000,
                    "the receiver never settles: {:?}",
                    p.nic.stats()
                );
            }
            return Outcome {
                sends,
                recvs,
                posted,
            };
        }
        if ran == 0 && before == (sends.len(), recvs.len()) {
            idle_rounds += 1;
            assert!(
                idle_rounds < 100,
                "no progress: {} of {} sends completed; sender {:?} {:?}, receiver {:?} {:?}; NIC {:?}",
                sends.len(),
                posted.len(),
                p.a.vqp.failure(),
                p.a.vqp.failover(),
                p.b.vqp.failure(),
                p.b.vqp.failover(),
                p.nic.stats()
            );
        } else {
            idle_rounds = 0;
        }
    }
}

fn check(p: &Pair, o: &Outcome, mode: Mode, qps: u32, src: &[u8], remote: &[u8]) {
    // Every accepted request completed exactly once, in posting order.
    assert_eq!(o.sends.len(), o.posted.len());
    for (i, wc) in o.sends.iter().enumerate() {
        assert_eq!(wc.wr_id, i as u64, "completions out of order");
        assert_eq!(wc.byte_len, o.posted[i].len);
        assert_eq!(wc.qp_num, 1);
    }
    // Each atomic took effect once if it succeeded (once or not at all otherwise: a
    // failed one may have), and fetched the counter's old value, 0.
    for (wc, r) in o.sends.iter().zip(&o.posted) {
        if r.op != Opcode::ATOMIC_FETCH_AND_ADD {
            continue;
        }
        let counter = p.nic.read_u64(p.b.buf + r.off).expect("readable");
        if wc.status.is_ok() {
            assert_eq!(counter, r.addend(), "atomic {} took effect once", wc.wr_id);
            let fetched = p.nic.read_u64(p.a.buf + r.off).expect("readable");
            assert_eq!(fetched, 0, "atomic {} fetched", wc.wr_id);
        } else {
            assert!([0, r.addend()].contains(&counter), "atomic {}", wc.wr_id);
        }
    }
    // Data of every successful request landed.
    for (wc, r) in o.sends.iter().zip(&o.posted) {
        if !wc.status.is_ok() || r.op == Opcode::ATOMIC_FETCH_AND_ADD {
            continue;
        }
        let range = r.off as usize..(r.off + r.len) as usize;
        let (buf, want) = if r.op == Opcode::RDMA_READ {
            (p.a.buf, remote)
        } else {
            (p.b.buf, src)
        };
        let got = p
            .nic
            .read_vec(buf + r.off, r.len as usize)
            .expect("readable");
        assert!(got == want[range], "request {} data differs", wc.wr_id);
    }
    // Receives complete in order, one for each successful WRITE_WITH_IMM (with the
    // immediate, SPRAY or one QP, or the whole length, DQPLB) and SEND (its length,
    // and its immediate if it has one).
    let imm_reqs: Vec<(usize, &Req)> = o
        .posted
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            matches!(
                r.op,
                Opcode::RDMA_WRITE_WITH_IMM | Opcode::SEND | Opcode::SEND_WITH_IMM
            )
        })
        .collect();
    let mut ok_recvs = 0;
    for (k, wc) in o.recvs.iter().enumerate() {
        let (i, r) = imm_reqs[k];
        assert_eq!(wc.wr_id, i as u64, "notifications out of order");
        if !wc.status.is_ok() {
            continue;
        }
        ok_recvs += 1;
        if r.op != Opcode::RDMA_WRITE_WITH_IMM {
            assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::RECV, r.len));
            let imm = (r.op == Opcode::SEND_WITH_IMM).then_some(r.imm);
            assert_eq!(wc.imm_data, imm);
            continue;
        }
        assert_eq!(wc.opcode, WcOpcode::RECV_RDMA_WITH_IMM);
        if mode == Mode::Dqplb && qps > 1 {
            assert_eq!(wc.imm_data, None);
            assert_eq!(wc.byte_len, r.len);
        } else {
            assert_eq!(wc.imm_data, Some(r.imm));
        }
    }
    // Without failures every notification arrived.
    if o.sends.iter().all(|w| w.status.is_ok()) {
        assert_eq!(ok_recvs, imm_reqs.len(), "a notification went missing");
    }
}

/// The opcode a test request of kind `k` uses: SENDs too where the virtual QP takes
/// them (SPRAY, or one data QP).
fn op_of(k: u8, sends: bool) -> Opcode {
    match k % 6 {
        5 => Opcode::ATOMIC_FETCH_AND_ADD,
        3 if sends => Opcode::SEND,
        4 if sends => Opcode::SEND_WITH_IMM,
        k => match k % 3 {
            0 => Opcode::RDMA_WRITE,
            1 => Opcode::RDMA_WRITE_WITH_IMM,
            _ => Opcode::RDMA_READ,
        },
    }
}

/// A length from 1 byte to 64 MiB, log-uniform.
fn length() -> impl Strategy<Value = u64> {
    (0u32..=26).prop_flat_map(|bits| 1u64..=(1u64 << bits))
}

/// How the sender stripes: a policy, a fan-out limit and the devices' weights; and
/// whether both sides survive a data QP's failure (re-dispatch).
#[derive(Clone, Copy, Debug)]
struct Striping {
    policy: Policy,
    fanout: u8,
    weights: [u32; vqp_core::MAX_DEVICES],
    redispatch: bool,
    /// Failed QP pairs are replaced as soon as seen (fail-back), the requests held
    /// meanwhile however long it takes.
    fail_back: bool,
}

fn striping() -> impl Strategy<Value = Striping> {
    (
        prop_oneof![
            Just(Policy::RoundRobin),
            Just(Policy::Weighted),
            Just(Policy::LeastOutstanding),
            Just(Policy::Adaptive)
        ],
        prop_oneof![Just(0u8), 1u8..=4],
        (1u32..=8, 1u32..=8),
    )
        .prop_map(|(policy, fanout, (w0, w1))| Striping {
            policy,
            fanout,
            weights: [w0, w1, 1, 1],
            redispatch: false,
            fail_back: false,
        })
}

#[allow(clippy::too_many_arguments)]
fn scenario(
    striping: Striping,
    qps: u32,
    spray: bool,
    devices: usize,
    max_frag: u32,
    max_outstanding: u32,
    every: bool,
    lens: &[(u64, u8)],
    seed: u64,
    policy: ReorderPolicy,
    fails: &[(u32, u64)],
    lost_acks: bool,
    notify_fault: Option<(bool, u64)>,
) {
    let mode = if spray { Mode::Spray } else { Mode::Dqplb };
    let longest = lens.iter().map(|l| l.0).max().unwrap_or(1);
    // Keep fragment counts within what a debug-build test runs quickly.
    let max_frag = max_frag.max((longest / 2048) as u32).max(1);
    let cfg = Config {
        split: SplitPolicy::new(max_frag),
        max_outstanding,
        recv_depth: 32,
        signaling: if every {
            Signaling::Every
        } else {
            Signaling::LastOfChain
        },
        policy: striping.policy,
        fanout: striping.fanout,
        weights: striping.weights,
        redispatch: striping.redispatch,
        grace_ns: if striping.fail_back { u64::MAX } else { 0 },
        // Re-weigh often: every 50 µs of the test's clock.
        adapt_ns: 50_000,
        ..Config::new(mode)
    };
    let len = 2 * (longest as usize + 4096).next_power_of_two();
    let mut p = pair(
        NicConfig {
            devices,
            seed,
            policy,
            ..NicConfig::default()
        },
        cfg,
        qps,
        len + ATOMICS,
    );
    let src = pattern(len, seed);
    let remote = pattern(len, !seed);
    p.nic.write(p.a.buf, &src).expect("writable");
    p.nic.write(p.b.buf, &remote).expect("writable");
    // Data QPs fail after some WQEs: the next one never arrives, or (`lost_acks`)
    // arrives and its acknowledgement is lost.
    for &(qp, after) in fails {
        let qpn = p.a.vqp.data_qp_num((qp % qps) as usize).expect("qp");
        if lost_acks {
            p.nic.lose_ack_after(qpn, after).expect("fault");
        } else {
            p.nic.fail_qp_after(qpn, after).expect("fault");
        }
    }
    // The sender's notify QP (SPRAY) fails after some notifies: its next one never
    // arrives, or arrives and its acknowledgement is lost.
    let notify_fault = notify_fault.filter(|_| spray && qps > 1);
    if let Some((lost_ack, after)) = notify_fault {
        let qpn = p.a.vqp.notify_qp_num().expect("a notify QP");
        if lost_ack {
            p.nic.lose_ack_after(qpn, after).expect("fault");
        } else {
            p.nic.fail_qp_after(qpn, after).expect("fault");
        }
    }
    // Writes carry a's lower half to the same offsets of b's lower half; READs carry
    // b's upper half back to a's upper half, so the two directions never overlap.
    let half = len as u64 / 2;
    let reqs: Vec<Req> = lens
        .iter()
        .enumerate()
        .map(|(i, &(l, k))| {
            let op = op_of(k, spray || qps == 1);
            let off = (seed.rotate_left(i as u32) % 4096).min(half - l);
            let (off, l) = match op {
                Opcode::RDMA_READ => (half + off, l),
                // Its own counter, past the data areas.
                Opcode::ATOMIC_FETCH_AND_ADD => (len as u64 + 8 * i as u64, 8),
                _ => (off, l),
            };
            Req {
                op,
                off,
                len: l,
                imm: (i as u32).wrapping_mul(0x9e37_79b9),
            }
        })
        .collect();
    let o = run(&mut p, &reqs, 1 + seed % 97, striping.fail_back);
    check(&p, &o, mode, qps, &src, &remote);
    let survivable = striping.redispatch
        && {
            let mut failing: Vec<u32> = fails.iter().map(|f| f.0 % qps).collect();
            failing.sort_unstable();
            failing.dedup();
            (failing.len() as u32) < qps || striping.fail_back
        }
        && (notify_fault.is_none() || striping.fail_back);
    // SENDs pass through data QP 0: without fail-back, one that meets it failed is
    // reported with the error (nothing else can take it) while the rest go on.
    // And an atomic in flight on a failed data QP 0 is reported with the error, fail-back
    // or not: whether it took effect cannot be known.
    let qp0_hit = fails.iter().any(|f| f.0 % qps == 0);
    let qp0_lost = !striping.fail_back && qp0_hit;
    let excused = |w: &Wc| match o.posted[w.wr_id as usize].op {
        Opcode::SEND | Opcode::SEND_WITH_IMM => qp0_lost,
        Opcode::ATOMIC_FETCH_AND_ADD => qp0_hit,
        _ => false,
    };
    if (fails.is_empty() && notify_fault.is_none()) || survivable {
        for w in o.sends.iter().filter(|w| !excused(w)) {
            assert_eq!(
                w.status,
                WcStatus::SUCCESS,
                "request {} failed; receiver: {:?}, NIC: {:?}",
                w.wr_id,
                p.b.vqp.failure(),
                p.nic.stats()
            );
        }
    } else if o.sends.iter().any(|w| !w.status.is_ok() && !excused(w)) {
        assert!(p.a.vqp.failure().is_some());
        assert_eq!(p.a.vqp.sends_in_flight(), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn requests_complete_once_in_order_with_their_data(
        qps in 1u32..=16,
        spray in any::<bool>(),
        devices in 1usize..=2,
        max_frag in prop_oneof![Just(4096u32), Just(65536), 1u32..20_000],
        max_outstanding in 1u32..=32,
        every in any::<bool>(),
        lens in prop::collection::vec((length(), any::<u8>()), 1..8),
        seed in any::<u64>(),
        adversarial in any::<bool>(),
        striping in striping(),
    ) {
        let policy = if adversarial { ReorderPolicy::Adversarial } else { ReorderPolicy::Random };
        scenario(striping, qps, spray, devices, max_frag, max_outstanding, every, &lens, seed, policy, &[], false, None);
    }

    #[test]
    fn a_failing_qp_reports_every_request_once(
        qps in 1u32..=8,
        spray in any::<bool>(),
        max_frag in 512u32..8192,
        lens in prop::collection::vec((1u64..200_000, any::<u8>()), 1..10),
        seed in any::<u64>(),
        fail_qp in 0u32..8,
        fail_after in 0u64..40,
        striping in striping(),
    ) {
        scenario(striping, qps, spray, 1, max_frag, 8, false, &lens, seed, ReorderPolicy::Random,
            &[(fail_qp, fail_after)], false, None);
    }

    /// Re-dispatch: data QPs fail at random times (the same QP may be named twice;
    /// the failing WQE lost, or landed with its acknowledgement lost), under every
    /// policy, both modes, one to eight data QPs, all opcodes (WRITE, WRITE_WITH_IMM,
    /// READ, SEND and SEND_WITH_IMM where the mode takes them, FETCH_AND_ADD). Without
    /// fail-back, any number short of all is survived and a failure of every QP fails
    /// the requests it must, each once; with it (each failed pair replaced as soon as
    /// seen, the requests held meanwhile), all of them are: every request is reported
    /// once, in order, successful, with its data — but an atomic in flight on a failed
    /// data QP 0, which is reported with the error (it took effect once or not at all).
    #[test]
    fn failing_qps_are_survived_with_redispatch(
        qps in 1u32..=8,
        spray in any::<bool>(),
        devices in 1usize..=2,
        max_frag in 512u32..8192,
        every in any::<bool>(),
        lens in prop::collection::vec((1u64..200_000, any::<u8>()), 1..10),
        seed in any::<u64>(),
        fails in prop::collection::vec((0u32..8, 0u64..40), 0..8),
        lost_acks in any::<bool>(),
        notify_fault in prop::option::of((any::<bool>(), 0u64..8)),
        fail_back in any::<bool>(),
        striping in striping(),
    ) {
        let striping = Striping { redispatch: true, fail_back, ..striping };
        scenario(striping, qps, spray, devices, max_frag, 8, every, &lens, seed,
            ReorderPolicy::Random, &fails, lost_acks, notify_fault);
    }

    /// Data QP 0, which pass-through requests use (SENDs in SPRAY; everything with one
    /// data QP), fails after a few WQEs — the next never arrives, or arrives and its
    /// acknowledgement is lost. With fail-back the SENDs in flight are settled by the
    /// receiver's count (those that landed complete, the rest are posted again on the
    /// replacement, after the receiver's receives that did not complete were posted
    /// again there): every request succeeds once, in order, and every receive
    /// completes once with its data. Without, the SENDs that meet the failure are
    /// reported with the error, each once.
    #[test]
    fn sends_in_flight_on_a_failed_qp_0_land_once(
        qps in 1u32..=4,
        max_frag in 512u32..8192,
        every in any::<bool>(),
        lens in prop::collection::vec(
            (1u64..50_000, prop_oneof![Just(3u8), Just(4u8), Just(1u8), any::<u8>()]),
            1..16,
        ),
        seed in any::<u64>(),
        lost_ack in any::<bool>(),
        after in 0u64..6,
        fail_back in any::<bool>(),
        striping in striping(),
    ) {
        let striping = Striping { redispatch: true, fail_back, ..striping };
        scenario(striping, qps, true, 1, max_frag, 8, every, &lens, seed,
            ReorderPolicy::Random, &[(0, after)], lost_ack, None);
    }

    /// SPRAY's notify QP fails after a few notifies — its next one never arrives, or
    /// arrives and its acknowledgement is lost, so the sender cannot tell which — with
    /// data QPs failing too or not. With fail-back (the notify QP pair replaced once
    /// both sides counted what arrived on it, the requests held meanwhile) every
    /// request is reported once, in order, successful, and every notification arrives
    /// once; without (no grace period), the virtual QP fails as before, each request
    /// reported once.
    #[test]
    fn a_failing_notify_qp_is_replaced_and_each_notify_lands_once(
        qps in 2u32..=6,
        max_frag in 512u32..8192,
        every in any::<bool>(),
        lens in prop::collection::vec((1u64..100_000, prop_oneof![Just(1u8), any::<u8>()]), 1..12),
        seed in any::<u64>(),
        lost_ack in any::<bool>(),
        after in 0u64..6,
        fails in prop::collection::vec((0u32..8, 0u64..40), 0..3),
        fail_back in any::<bool>(),
        striping in striping(),
    ) {
        let striping = Striping { redispatch: true, fail_back, ..striping };
        scenario(striping, qps, true, 1, max_frag, 8, every, &lens, seed,
            ReorderPolicy::Random, &fails, lost_ack, Some((lost_ack, after)));
    }
}

#[test]
fn a_refused_request_posts_nothing() {
    let cfg = Config {
        split: SplitPolicy::new(4096),
        max_outstanding: 4,
        recv_depth: 8,
        ..Config::new(Mode::Dqplb)
    };
    let mut p = pair(NicConfig::default(), cfg, 4, 1 << 16);
    let keys = p.a.keys(&p.b);
    let wr = SendWr::new(1, Opcode::RDMA_WRITE, p.a.buf, 1 << 16, p.b.buf, keys);
    // Four QPs × four WQEs fill up with one 64 KiB write of 16 fragments.
    p.a.vqp.post_send(&wr).expect("accepted");
    let wqes = |p: &Pair| -> u64 {
        (0..4)
            .map(|i| p.a.vqp.lane_stats(i).expect("lane").wqes)
            .sum()
    };
    let before = wqes(&p);
    let bad = [
        SendWr { len: 0, ..wr },
        SendWr {
            opcode: Opcode(99),
            ..wr
        },
        wr.flags(SendFlags::NONE),
        SendWr {
            keys: vqp_core::Keys::none(),
            ..wr
        },
    ];
    for b in bad {
        assert!(p.a.vqp.post_send(&b).is_err());
    }
    assert_eq!(wqes(&p), before);
    assert_eq!(p.a.vqp.sends_in_flight(), 1);
}
