//! The striping policies over the mock provider: where fragments go.

use super::*;

/// A virtual QP over data QPs 100.. on `devices` (one entry per QP), with `cfg`.
fn on_devices<'f>(f: &'f Fabric, cfg: Config, devices: &[u8]) -> (Vqp<'f>, Vcq<'f>) {
    let data = devices.iter().enumerate().map(|(i, &d)| {
        (
            MockQp {
                qpn: 100 + i as u32,
                f,
            },
            d,
        )
    });
    let mut vqp = Vqp::new(cfg, data, None).unwrap();
    let mut vcq = Vcq::new();
    vcq.add_cq(MockCq(f), 0, 1024).unwrap();
    vcq.add_cq(MockCq(f), 1, 1024).unwrap();
    vcq.attach(&mut vqp).unwrap();
    (vqp, vcq)
}

fn keys2() -> Keys {
    Keys::single(1, 2).with(1, 3, 4)
}

fn wqes_per_qp(f: &Fabric, n: u32) -> Vec<u32, 8> {
    (0..n)
        .map(|q| {
            f.sends
                .borrow()
                .iter()
                .filter(|(qpn, _)| *qpn == 100 + q)
                .count() as u32
        })
        .collect()
}

fn policy(policy: Policy, weights: [u32; 4]) -> Config {
    Config {
        policy,
        weights,
        ..config(Mode::Dqplb)
    }
}

#[test]
fn weighted_shares_follow_the_device_weights() {
    let f = Fabric::default();
    let (mut vqp, _) = on_devices(&f, policy(Policy::Weighted, [1, 3, 1, 1]), &[0, 0, 1, 1]);
    for i in 0..2 {
        let wr = SendWr {
            keys: keys2(),
            ..write(i, 1 << 20)
        };
        vqp.post_send(&wr).unwrap();
    }
    // 32 fragments of 64 KiB: QPs on device 1 weigh three times those on device 0.
    assert_eq!(wqes_per_qp(&f, 4), [4, 4, 12, 12]);
    assert_eq!(
        (vqp.weight(0), vqp.weight(2), vqp.weight(4)),
        (Some(1), Some(3), None)
    );
}

#[test]
fn a_full_qp_is_waited_for_and_set_weights_take_effect() {
    let f = Fabric::default();
    let cfg = Config {
        max_outstanding: 4,
        ..policy(Policy::Weighted, [1; 4])
    };
    let (mut vqp, mut vcq) = on_devices(&f, cfg, &[0, 0]);
    assert!(vqp.set_weight(1, 3));
    assert!(!vqp.set_weight(2, 3));
    // 8 fragments; QP 101's share is 6 but it holds 4: the rest wait for it rather
    // than go to QP 100.
    vqp.post_send(&write(1, 8 << 16)).unwrap();
    assert_eq!(wqes_per_qp(&f, 2), [2, 4]);
    let first = f.signaled();
    for &i in &first {
        f.complete_send(i, WcStatus::SUCCESS);
    }
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    assert_eq!(wqes_per_qp(&f, 2), [2, 6]);
    // Bytes are counted as they are posted.
    let bytes: Vec<u64, 2> = (0..2).map(|i| vqp.lane_stats(i).unwrap().bytes).collect();
    assert_eq!(bytes, [2 << 16, 6 << 16]);
}

#[test]
fn a_failed_qp_s_share_goes_elsewhere() {
    let f = Fabric::default();
    let (mut vqp, _) = on_devices(&f, policy(Policy::Weighted, [1; 4]), &[0, 0]);
    vqp.lanes.data[1].failed = true;
    vqp.lanes.room &= !2;
    vqp.post_send(&write(1, 4 << 16)).unwrap();
    assert_eq!(wqes_per_qp(&f, 2), [4, 0]);
}

#[test]
fn fan_out_limits_the_qps_of_one_request() {
    for p in [
        Policy::RoundRobin,
        Policy::Weighted,
        Policy::LeastOutstanding,
        Policy::Adaptive,
    ] {
        let f = Fabric::default();
        let cfg = Config {
            fanout: 2,
            ..policy(p, [1; 4])
        };
        let (mut vqp, _) = on_devices(&f, cfg, &[0, 0, 0, 0]);
        vqp.post_send(&write(1, 8 << 16)).unwrap();
        let per = wqes_per_qp(&f, 4);
        assert_eq!(per.iter().filter(|&&k| k != 0).count(), 2, "{p:?}: {per:?}");
        assert_eq!(per.iter().sum::<u32>(), 8);
        // A second request may use two other QPs.
        vqp.post_send(&write(2, 8 << 16)).unwrap();
        assert_eq!(wqes_per_qp(&f, 4).iter().sum::<u32>(), 16);
    }
}

#[test]
fn small_requests_go_to_the_least_loaded_qp() {
    let f = Fabric::default();
    let (mut vqp, _) = on_devices(&f, policy(Policy::LeastOutstanding, [1; 4]), &[0, 0]);
    for (i, len) in [1000, 1000, 3000, 500, 400].into_iter().enumerate() {
        vqp.post_send(&write(i as u64, len)).unwrap();
    }
    // Loads (QP 100, QP 101): 1000/0, 1000/1000, 4000/1000, 4000/1500, 4000/1900.
    let qps: Vec<u32, 8> = f.sends.borrow().iter().map(|(q, _)| *q).collect();
    assert_eq!(qps, [100, 101, 100, 101, 101]);

    // Weighted: loads relative to the weights (QP 101 weighs 3).
    let f = Fabric::default();
    let (mut vqp, _) = on_devices(&f, policy(Policy::Weighted, [1, 3, 1, 1]), &[0, 1]);
    for (i, len) in [1000, 1000, 1000, 1000, 1000].into_iter().enumerate() {
        let wr = SendWr {
            keys: keys2(),
            ..write(i as u64, len)
        };
        vqp.post_send(&wr).unwrap();
    }
    let qps: Vec<u32, 8> = f.sends.borrow().iter().map(|(q, _)| *q).collect();
    assert_eq!(qps, [100, 101, 101, 101, 100]);
}

#[test]
fn a_completed_load_is_forgotten() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = on_devices(&f, policy(Policy::LeastOutstanding, [1; 4]), &[0, 0]);
    vqp.post_send(&write(0, 5000)).unwrap();
    vqp.post_send(&write(1, 1000)).unwrap();
    f.complete_send(0, WcStatus::SUCCESS);
    poll(&mut vcq, &mut vqp);
    // QP 100's 5000 bytes completed: it is the lighter now.
    vqp.post_send(&write(2, 1000)).unwrap();
    assert_eq!(f.sends.borrow()[2].0, 100);
}

#[test]
fn adaptive_weights_follow_what_each_qp_completes() {
    let f = Fabric::default();
    let cfg = Config {
        adapt_ns: 1000,
        ..policy(Policy::Adaptive, [1; 4])
    };
    let (mut vqp, mut vcq) = on_devices(&f, cfg, &[0, 0]);
    assert!(!vqp.sample(0), "the first sample starts the meter");
    let mut now = 0;
    let mut completed = [false; 512];
    for i in 0..40u64 {
        vqp.post_send(&write(i, 4 << 16)).unwrap();
        // QP 100 completes what it was given at once; QP 101 every eighth round.
        let sends = f.sends.borrow().clone();
        for (k, (qpn, w)) in sends.iter().enumerate() {
            let due = *qpn == 100 || i % 8 == 7;
            if !completed[k] && due && w.flags.contains(SendFlags::SIGNALED) {
                f.complete_send(k, WcStatus::SUCCESS);
                completed[k] = true;
            }
        }
        poll(&mut vcq, &mut vqp);
        now += 1000;
        vqp.sample(now);
    }
    assert!(!vqp.sample(now + 999), "not due yet");
    let (fast, stuck) = (vqp.weight(0).unwrap(), vqp.weight(1).unwrap());
    assert!(fast > 2 * stuck, "{fast} vs {stuck}");
    // Weighted and round-robin virtual QPs do not sample.
    let (mut rr, _) = on_devices(&f, config(Mode::Dqplb), &[0, 0]);
    assert!(!rr.sample(1 << 40));
}

#[test]
fn a_qp_that_work_waits_for_is_busy_though_each_completion_empties_it() {
    // Last-of-chain signaling, 4 WQEs of room: one completion acknowledges all QP
    // 101 has in flight, so it runs dry at every completion. It completes only every
    // fourth round, and fragments wait for it: it is the bottleneck, and QP 100 (which
    // completes at once) must gain on it.
    let f = Fabric::default();
    let cfg = Config {
        adapt_ns: 4000,
        max_outstanding: 4,
        signaling: Signaling::LastOfChain,
        ..policy(Policy::Adaptive, [1; 4])
    };
    let (mut vqp, mut vcq) = on_devices(&f, cfg, &[0, 0]);
    vqp.sample(0);
    let mut completed = [false; 512];
    let mut next = 0;
    for round in 1..=40u64 {
        while vqp.post_send(&write(next, 4 << 16)).is_ok() {
            next += 1;
        }
        let sends = f.sends.borrow().clone();
        for k in f.signaled() {
            if !completed[k] && (sends[k].0 == 100 || round % 4 == 0) {
                f.complete_send(k, WcStatus::SUCCESS);
                completed[k] = true;
            }
        }
        poll(&mut vcq, &mut vqp);
        vqp.sample(round * 1000);
    }
    let (fast, slow) = (vqp.weight(0).unwrap(), vqp.weight(1).unwrap());
    assert!(2 * fast >= 3 * slow, "{fast} vs {slow}");
}

#[test]
fn an_adaptive_qp_starts_slow_until_the_meter_saw_it_complete() {
    // A window posted at once is not spread by weights that say nothing yet: each
    // QP takes SLOW_START WQEs until a sample measured it, then the rest at once.
    let f = Fabric::default();
    let cfg = Config {
        adapt_ns: 1_000_000,
        ..policy(Policy::Adaptive, [1; 4])
    };
    let (mut vqp, mut vcq) = on_devices(&f, cfg, &[0, 0]);
    vqp.sample(0);
    vqp.post_send(&write(0, 2 << 20)).unwrap();
    let slow = crate::vqp::policy::SLOW_START;
    assert_eq!(wqes_per_qp(&f, 2), [slow, slow]);
    for k in f.signaled() {
        f.complete_send(k, WcStatus::SUCCESS);
    }
    poll(&mut vcq, &mut vqp);
    assert_eq!(wqes_per_qp(&f, 2), [2 * slow, 2 * slow], "not measured yet");
    // 256 KiB a millisecond: budgets above the 16 fragments left, posted at once.
    assert!(vqp.sample(1_000_000));
    let [a, b] = [0, 1].map(|i| wqes_per_qp(&f, 2)[i]);
    assert!(a + b == 32 && a > 2 * slow && b > 2 * slow, "{a} and {b}");
}

#[test]
fn an_adaptive_qp_holds_what_it_serves_in_the_backlog_bound_not_the_maximum() {
    // Each QP completes one 64 KiB fragment every fourth millisecond (16 MB/s: in
    // BACKLOG_NS, 20 ms, five fragments) while requests wait for room. Once measured,
    // neither holds more than its budget and one fragment, though the configured
    // maximum would let each hold 16 (and the requests waiting would fill them).
    let f = Fabric::default();
    let cfg = Config {
        adapt_ns: 1_000_000,
        signaling: Signaling::Every,
        ..policy(Policy::Adaptive, [1; 4])
    };
    let (mut vqp, mut vcq) = on_devices(&f, cfg, &[0, 0]);
    vqp.sample(0);
    let mut completed = [false; 512];
    let (mut next, mut most) = (0, [0; 2]);
    for ms in 1..=80u64 {
        while vqp.post_send(&write(next, 4 << 16)).is_ok() {
            next += 1;
        }
        if ms % 4 == 0 {
            let sends = f.sends.borrow().clone();
            for qpn in [100, 101] {
                let k = (0..sends.len()).find(|&k| !completed[k] && sends[k].0 == qpn);
                if let Some(k) = k {
                    f.complete_send(k, WcStatus::SUCCESS);
                    completed[k] = true;
                }
            }
        }
        poll(&mut vcq, &mut vqp);
        vqp.sample(ms * 1_000_000);
        if ms > 40 {
            for (m, l) in most.iter_mut().zip(&vqp.lanes.data) {
                *m = (*m).max(l.outstanding);
            }
        }
    }
    assert!(
        most.iter().all(|&m| (1..=6).contains(&m)),
        "held at most {most:?} WQEs"
    );
}

#[test]
fn a_device_in_use_needs_a_weight() {
    let f = Fabric::default();
    let data = [0u8, 1].map(|d| {
        (
            MockQp {
                qpn: 100 + u32::from(d),
                f: &f,
            },
            d,
        )
    });
    let cfg = policy(Policy::Weighted, [1, 0, 1, 1]);
    assert_eq!(Vqp::new(cfg, data, None).err(), Some(BuildError::Weight(1)));
}

#[test]
fn lane_bytes_are_kept_where_asked_for_or_read() {
    // A spread request (2 fragments per QP), a one-fragment one, and one posted alone.
    for (policy, count_bytes, kept) in [
        (Policy::RoundRobin, false, false),
        (Policy::RoundRobin, true, true),
        (Policy::LeastOutstanding, false, true),
    ] {
        let f = Fabric::default();
        let cfg = Config {
            policy,
            count_bytes,
            ..config(Mode::Dqplb)
        };
        let (mut vqp, _) = build_with(&f, cfg, 2);
        vqp.post_send(&write(1, (4 << 16) - 100)).unwrap();
        vqp.post_send(&write(2, 300)).unwrap();
        let total: u64 = (0..2).map(|i| vqp.lane_stats(i).unwrap().bytes).sum();
        let want = if kept { (4 << 16) - 100 + 300 } else { 0 };
        assert_eq!(total, want, "{policy:?}, count_bytes {count_bytes}");
    }
}
