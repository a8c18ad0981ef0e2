//! The virtual QP end to end through the `dlopen` path: `libvqp_softverbs.so` loaded by
//! `Verbs::load_from`, host `Endpoint`s exchanging cards in their byte form, both modes,
//! 1, 2, 4 and 8 data QPs, 1 B to 64 MiB, one or two devices per side (keys per
//! device), every reorder policy, a data QP failing mid-transfer and a wrong rkey.
//! Every completion is checked (wr_id, order, status, opcode, byte_len, immediate) and
//! every destination byte of a successful request, as well as the bytes around it.
//!
//! The provider's reorder policy and fault rules are process-wide, so the tests take a
//! lock and run one at a time.

#[path = "common/softverbs.rs"]
mod softverbs;

use softverbs::*;
use vqp_core::{Mode, Opcode, PostSendError, SendWr, WcStatus};
use vqp_host::QpState;
use vqp_softverbs::Reorder;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// WRITE_WITH_IMM of every size, a plain WRITE, and READs.
fn mixed_requests() -> Vec<(Opcode, u64)> {
    vec![
        (Opcode::RDMA_WRITE_WITH_IMM, 1),
        (Opcode::RDMA_WRITE_WITH_IMM, 4 * KIB),
        (Opcode::RDMA_WRITE_WITH_IMM, MIB),
        (Opcode::RDMA_WRITE, 4 * KIB + 1),
        (Opcode::RDMA_READ, MIB + 7),
        (Opcode::RDMA_WRITE_WITH_IMM, 3 * (MAX_FRAG as u64) + 17),
        (Opcode::RDMA_READ, 1),
    ]
}

/// Runs `ops` over a fresh pair and checks everything succeeded.
fn run_ok(mode: Mode, qps: usize, devices: usize, ops: &[(Opcode, u64)]) -> Pair {
    let (reqs, w, r) = layout(ops);
    let mut p = pair(mode, qps, devices, w, r);
    let o = run(&mut p, &reqs, false);
    check_all_ok(&p, &reqs, &o);
    p
}

/// Every data QP carried fragments (so, with two devices, both devices did).
fn every_qp_used(p: &Pair) {
    for i in 0..p.qps {
        let stats = p.a.conn.vqp.lane_stats(i).expect("lane");
        assert!(stats.wqes > 0, "{:?}: data QP {i} carried nothing", p.mode);
    }
}

#[test]
fn both_modes_1_2_4_8_data_qps_sizes_1b_to_1mib_with_reads() {
    let _serial = serial();
    controls().set_order(Reorder::Random { seed: 0x5eed });
    for mode in [Mode::Dqplb, Mode::Spray] {
        for qps in [1, 2, 4, 8] {
            let p = run_ok(mode, qps, 1, &mixed_requests());
            every_qp_used(&p);
        }
    }
}

#[test]
fn sixty_four_mib_in_each_mode() {
    let _serial = serial();
    controls().set_order(Reorder::Random { seed: 64 });
    for mode in [Mode::Dqplb, Mode::Spray] {
        let p = run_ok(
            mode,
            8,
            2,
            &[
                (Opcode::RDMA_WRITE_WITH_IMM, 64 * MIB),
                (Opcode::RDMA_WRITE_WITH_IMM, 1),
            ],
        );
        every_qp_used(&p);
    }
}

#[test]
fn a_virtual_qp_spanning_two_devices_on_each_side() {
    let _serial = serial();
    controls().set_order(Reorder::Random { seed: 2 });
    for mode in [Mode::Dqplb, Mode::Spray] {
        for qps in [2, 4, 8] {
            let p = run_ok(mode, qps, 2, &mixed_requests());
            every_qp_used(&p);
            // The keys really are per device: device 1's are not device 0's.
            let k = p.keys();
            assert_ne!(k.get(0), k.get(1));
        }
    }
    // A request without device 1's keys is refused whole, before anything is posted.
    let (reqs, w, r) = layout(&[(Opcode::RDMA_WRITE, MIB)]);
    let mut p = pair(Mode::Dqplb, 2, 2, w, r);
    let k = p.keys().get(0).expect("device 0");
    let wr = SendWr::new(
        0,
        Opcode::RDMA_WRITE,
        p.a.addr(0),
        MIB,
        p.b.addr(0),
        vqp_core::Keys::single(k.0, k.1),
    );
    assert_eq!(
        p.a.conn.vqp.post_send(&wr),
        Err(PostSendError::MissingKey { device: 1 })
    );
    assert_eq!(p.a.conn.vqp.sends_in_flight(), 0);
    let o = run(&mut p, &reqs, false);
    check_all_ok(&p, &reqs, &o);
}

#[test]
fn every_reorder_policy() {
    let _serial = serial();
    let ops: Vec<_> = (0..12)
        .map(|i| {
            let op = if i % 4 == 3 {
                Opcode::RDMA_READ
            } else {
                Opcode::RDMA_WRITE_WITH_IMM
            };
            (op, MIB / 2 + i * 4099)
        })
        .collect();
    for order in [
        Reorder::Fifo,
        Reorder::Random { seed: 0xfeed },
        Reorder::Adversarial,
    ] {
        controls().set_order(order);
        for mode in [Mode::Dqplb, Mode::Spray] {
            for devices in [1, 2] {
                let p = run_ok(mode, 4, devices, &ops);
                let reordered = p.b.conn.vqp.reordered_arrivals();
                if mode == Mode::Dqplb && order != Reorder::Fifo {
                    // Fragments of 9 requests over 4 QPs, executed out of posting
                    // order: the receiver's window must have put some back in order.
                    assert!(reordered > 0, "{order:?}: nothing arrived out of order");
                }
            }
        }
    }
    controls().set_order(Reorder::Fifo);
}

#[test]
fn a_data_qp_failing_mid_transfer_reports_every_request_once() {
    let _serial = serial();
    controls().set_order(Reorder::Random { seed: 7 });
    for mode in [Mode::Dqplb, Mode::Spray] {
        for devices in [1, 2] {
            let ops = vec![(Opcode::RDMA_WRITE_WITH_IMM, MIB); 8];
            let (reqs, w, r) = layout(&ops);
            let mut p = pair(mode, 4, devices, w, r);
            // Data QP 2 (device 0) fails at its 11th WQE: in the third request, as
            // each request puts 4 of its 16 fragments on each QP.
            let victim = p.a.conn.vqp.data_qp_num(2).expect("qp");
            controls().fail_qp_after(victim, 10);
            let mut o = run(&mut p, &reqs, true);
            controls().clear_faults();
            shut_down_receiver(&mut p, &mut o);
            let what = format!("{mode:?} over {devices} devices");

            // Sender: every accepted request reported exactly once, in order. The
            // request whose fragment met the failing WQE reports the QP's own error;
            // every other affected one is flushed (in SPRAY that includes requests
            // whose data had landed but whose notify was not yet through).
            assert!(o.posted >= 3, "{what}: {} posted", o.posted);
            assert_eq!(o.sends.len(), o.posted, "{what}: one report per request");
            for (i, wc) in o.sends.iter().enumerate() {
                check_send_fields(&p, &reqs, i, wc);
            }
            let statuses: Vec<_> = o.sends.iter().map(|w| w.status).collect();
            let own: Vec<_> = (0..statuses.len())
                .filter(|&i| statuses[i] == WcStatus::RETRY_EXC_ERR)
                .collect();
            assert_eq!(own.len(), 1, "{what}: {statuses:?}");
            assert!(
                own[0] <= 2,
                "{what}: the failing WQE is in request 2: {statuses:?}"
            );
            for (i, wc) in o.sends.iter().enumerate() {
                if wc.status.is_ok() {
                    assert!(landed(&p, &reqs[i]), "{what}: request {i} reported done");
                } else if i != own[0] {
                    assert_eq!(wc.status, WcStatus::WR_FLUSH_ERR, "{what}: request {i}");
                }
            }
            let vqp = &p.a.conn.vqp;
            assert_eq!(vqp.failure(), Some(WcStatus::RETRY_EXC_ERR), "{what}");
            assert_eq!(
                vqp.sends_in_flight(),
                0,
                "{what}: a request was never reported"
            );
            let wr = SendWr::new(
                99,
                Opcode::RDMA_WRITE,
                p.a.addr(0),
                1,
                p.b.addr(0),
                p.keys(),
            );
            assert_eq!(
                p.a.conn.vqp.post_send(&wr),
                Err(PostSendError::Failed(WcStatus::RETRY_EXC_ERR)),
                "{what}: a failed virtual QP takes nothing new"
            );

            // Receiver: every receive reported exactly once, in order: successes (for
            // requests whose data is all there), then errors.
            assert_eq!(o.recvs.len(), o.recv_for.len(), "{what}");
            let mut failed = false;
            for (wc, &i) in o.recvs.iter().zip(&o.recv_for) {
                assert_eq!(wc.wr_id, i as u64, "{what}: receives out of order");
                if wc.status.is_ok() {
                    assert!(!failed, "{what}: receive {i} succeeded after an error");
                    assert_eq!(
                        (wc.imm_data, wc.byte_len),
                        p.expected_recv(reqs[i].len, Req::imm(i)),
                        "{what}: recv {i}"
                    );
                    assert!(landed(&p, &reqs[i]), "{what}: receive {i} before its data");
                    assert!(
                        o.sends[i].status.is_ok(),
                        "{what}: {i} failed at the sender"
                    );
                } else {
                    failed = true;
                }
            }
            assert!(
                failed,
                "{what}: the receives of failed requests end in errors"
            );
            assert_eq!(p.b.conn.vqp.recvs_in_flight(), 0, "{what}");
            assert_eq!(p.a.conn.vcq.strays() + p.b.conn.vcq.strays(), 0, "{what}");
        }
    }
}

#[test]
fn a_wrong_rkey_is_a_remote_access_error_for_that_request() {
    let _serial = serial();
    controls().set_order(Reorder::Random { seed: 11 });
    for mode in [Mode::Dqplb, Mode::Spray] {
        for (devices, qps, bad_device) in [(1, 1, 0), (1, 4, 0), (2, 4, 1), (2, 4, 0)] {
            let what = format!("{mode:?}, {qps} QPs over {devices} devices, bad on {bad_device}");
            let ops = [(Opcode::RDMA_WRITE_WITH_IMM, MIB); 2];
            let (mut reqs, w, r) = layout(&ops);
            let mut p = pair(mode, qps, devices, w, r);
            // The first request succeeds on its own.
            let first = run(&mut p, &reqs[..1], false);
            check_all_ok(&p, &reqs[..1], &first);
            // The second names a wrong rkey for one device.
            let keys = p.keys();
            let (l, rk) = keys.get(bad_device).expect("device keys");
            reqs[1].keys = Some(keys.with(bad_device, l, rk ^ 0x5a5a_0000));
            let mut o = run_from(&mut p, &reqs, 1, true);
            shut_down_receiver(&mut p, &mut o);

            assert_eq!(o.posted, 2, "{what}");
            assert_eq!(o.sends.len(), 1, "{what}: the second request, once");
            check_send_fields(&p, &reqs, 1, &o.sends[0]);
            assert_eq!(o.sends[0].status, WcStatus::REM_ACCESS_ERR, "{what}");
            assert_eq!(p.a.conn.vqp.failure(), Some(WcStatus::REM_ACCESS_ERR));
            assert_eq!(p.a.conn.vqp.sends_in_flight(), 0, "{what}");
            // Its notification never came; it is reported once, by the receiver's own
            // failure or its shutdown (see the test below).
            assert_eq!(o.recv_for, [1], "{what}");
            assert_eq!(o.recvs.len(), 1, "{what}");
            assert_eq!(o.recvs[0].wr_id, 1, "{what}");
            assert!(!o.recvs[0].status.is_ok(), "{what}: {}", o.recvs[0].status);
            // Nothing was lost: the first request's data is intact.
            assert!(landed(&p, &reqs[0]), "{what}: first request's data");
            if devices == 1 {
                // Every fragment carried the bad rkey: nothing was written.
                let (_, dst) = regions(&p, &reqs[1]);
                assert!(
                    dst.iter().all(|&b| b == 0),
                    "{what}: written with a bad rkey"
                );
            }
        }
    }
}

#[test]
fn a_remote_access_error_fails_the_receivers_qp_and_reports_each_receive_once() {
    let _serial = serial();
    controls().set_order(Reorder::Random { seed: 13 });
    for mode in [Mode::Dqplb, Mode::Spray] {
        for (devices, qps, bad_device) in [(1, 1, 0), (1, 4, 0), (2, 4, 1)] {
            let what = format!("{mode:?}, {qps} QPs over {devices} devices, bad on {bad_device}");
            let ops = [(Opcode::RDMA_WRITE_WITH_IMM, MIB); 4];
            let (mut reqs, w, r) = layout(&ops);
            let mut p = pair(mode, qps, devices, w, r);
            let first = run(&mut p, &reqs[..1], false);
            check_all_ok(&p, &reqs[..1], &first);
            // Requests 1.. name a wrong rkey for one device: each has fragments there.
            let keys = p.keys();
            let (l, rk) = keys.get(bad_device).expect("device keys");
            for req in &mut reqs[1..] {
                req.keys = Some(keys.with(bad_device, l, rk ^ 0x5a5a_0000));
            }
            let mut o = run_from(&mut p, &reqs, 1, true);
            assert!(!o.sends.is_empty(), "{what}");
            assert!(o.sends.iter().all(|wc| !wc.status.is_ok()), "{what}");
            assert_eq!(
                o.sends.len(),
                o.posted - 1,
                "{what}: one report per request"
            );

            // The receiver's physical side, as ConnectX leaves it: every data QP that
            // met a bad fragment is in error and raised one access event; the others
            // raised nothing.
            let found = p.b.data_qp_events();
            assert_eq!(found.others, [], "{what}: events for other objects");
            let mut failed = 0;
            for (i, (state, events)) in found.per_qp.iter().enumerate() {
                if *state == QpState::Err && !events.is_empty() {
                    assert_eq!(events, &[EVENT_QP_ACCESS_ERR], "{what}: data QP {i}");
                    failed += 1;
                } else if p.b.conn.vqp.failure().is_none() {
                    assert_eq!(events, &[] as &[u32], "{what}: data QP {i} in {state:?}");
                    assert_eq!(*state, QpState::Rts, "{what}: data QP {i}");
                }
            }
            assert!(failed >= 1, "{what}: no receiver QP saw the access error");

            // The virtual receiver: where its receives sit on a failed QP (DQPLB's
            // kept-posted receives; the single data QP's notification receives) their
            // flush fails it, and it reports every pending receive once, in order,
            // without being shut down. SPRAY's notification receives sit on the notify
            // QP, which no error touched: they wait for the shutdown.
            let receives_on_data_qps = mode == Mode::Dqplb || qps == 1;
            let pending = o.recv_for.len();
            assert!(pending >= 1, "{what}");
            if receives_on_data_qps {
                assert!(p.b.conn.vqp.failure().is_some(), "{what}: receiver failed");
                assert_eq!(o.recvs.len(), pending, "{what}: reported without shutdown");
            } else {
                assert_eq!(p.b.conn.vqp.failure(), None, "{what}");
                assert_eq!(o.recvs.len(), 0, "{what}");
                assert_eq!(p.b.conn.vqp.recvs_in_flight(), pending, "{what}");
            }
            shut_down_receiver(&mut p, &mut o);
            assert_eq!(o.recvs.len(), pending, "{what}: once each");
            for (wc, &i) in o.recvs.iter().zip(&o.recv_for) {
                assert_eq!(wc.wr_id, i as u64, "{what}: receives out of order");
                assert!(!wc.status.is_ok(), "{what}: receive {i}: {}", wc.status);
            }
            // A later poll reports nothing more.
            let mut more = Vec::new();
            for _ in 0..20 {
                p.b.poll(&mut more);
            }
            assert_eq!(more, [], "{what}: reported twice");
            assert_eq!(p.b.conn.vqp.recvs_in_flight(), 0, "{what}");
            assert_eq!(p.a.conn.vcq.strays() + p.b.conn.vcq.strays(), 0, "{what}");
            assert!(landed(&p, &reqs[0]), "{what}: first request's data");
        }
    }
    controls().set_order(Reorder::Fifo);
}
