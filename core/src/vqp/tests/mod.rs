//! Unit tests of the engine over a mock provider whose completions the test
//! chooses, in any order.

use core::cell::{Cell, RefCell};

use heapless::{Deque, Vec};

use super::*;
use crate::phys::{PhysCq, PollFailure, PostFailure, RecvWqe, SendWqe};
use crate::split::SplitPolicy;
use crate::vcq::{CqError, VirtualCq};
use crate::wr::{Keys, Opcode, RecvWr, SendFlags, SendWr, WcOpcode};
use crate::wrid::{Kind, WrId};

/// Everything the mock QPs posted, and the completions the test will return.
#[derive(Default)]
struct Fabric {
    sends: RefCell<Vec<(u32, SendWqe), 512>>,
    recvs: RefCell<Vec<(u32, RecvWqe), 512>>,
    send_calls: Cell<u32>,
    refuse: Cell<bool>,
    errored: RefCell<Vec<u32, 16>>,
    cqes: RefCell<Deque<PhysWc, 512>>,
}

struct MockQp<'f> {
    qpn: u32,
    f: &'f Fabric,
}

impl PhysQp for MockQp<'_> {
    fn qp_num(&self) -> u32 {
        self.qpn
    }
    fn post_send(&mut self, wqes: &[SendWqe]) -> Result<(), PostFailure> {
        if self.f.refuse.get() {
            return Err(PostFailure {
                posted: 0,
                errno: 12,
            });
        }
        self.f.send_calls.set(self.f.send_calls.get() + 1);
        for w in wqes {
            self.f.sends.borrow_mut().push((self.qpn, *w)).unwrap();
        }
        Ok(())
    }
    fn post_recv(&mut self, wqes: &[RecvWqe]) -> Result<(), PostFailure> {
        for w in wqes {
            self.f.recvs.borrow_mut().push((self.qpn, *w)).unwrap();
        }
        Ok(())
    }
    fn set_error(&mut self) {
        self.f.errored.borrow_mut().push(self.qpn).unwrap();
    }
}

struct MockCq<'f>(&'f Fabric);

impl PhysCq for MockCq<'_> {
    fn poll(&mut self, out: &mut [PhysWc]) -> Result<usize, PollFailure> {
        let mut q = self.0.cqes.borrow_mut();
        let mut n = 0;
        while n < out.len() {
            match q.pop_front() {
                Some(wc) => out[n] = wc,
                None => break,
            }
            n += 1;
        }
        Ok(n)
    }
}

impl Fabric {
    /// Queue a completion of send WQE `index` (in posting order) with `status`.
    fn complete_send(&self, index: usize, status: WcStatus) {
        let (qpn, w) = self.sends.borrow()[index];
        self.push(PhysWc {
            wr_id: w.wr_id,
            status,
            opcode: w.opcode.completion(),
            qp_num: qpn,
            byte_len: w.len,
            imm_data: None,
        });
    }

    /// Indices of the signaled send WQEs.
    fn signaled(&self) -> Vec<usize, 512> {
        let sends = self.sends.borrow();
        (0..sends.len())
            .filter(|&i| sends[i].1.flags.contains(SendFlags::SIGNALED))
            .collect()
    }

    fn push(&self, wc: PhysWc) {
        self.cqes.borrow_mut().push_back(wc).unwrap();
    }

    /// A DQPLB fragment arrival on `qpn` consuming one of its kept-posted receives.
    fn arrive(&self, qpn: u32, seq: u32, notify: bool, len: u32) {
        let wr_id = self
            .recvs
            .borrow()
            .iter()
            .find(|(q, _)| *q == qpn)
            .unwrap()
            .1
            .wr_id;
        self.push(PhysWc {
            wr_id,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::RECV_RDMA_WITH_IMM,
            qp_num: qpn,
            byte_len: len,
            imm_data: Some(crate::imm::Imm::new(crate::seq::Seq::new(seq), notify).to_wire()),
        });
    }
}

type Vqp<'f> = VirtualQp<MockQp<'f>, 4, 16, 16, 128>;
type Vcq<'f> = VirtualCq<MockCq<'f>, 2, 8>;

fn config(mode: Mode) -> Config {
    Config {
        split: SplitPolicy::new(64 << 10),
        max_outstanding: 16,
        recv_depth: 4,
        qp_num: 77,
        ..Config::new(mode)
    }
}

fn build<'f>(f: &'f Fabric, mode: Mode, qps: u32) -> (Vqp<'f>, Vcq<'f>) {
    build_with(f, config(mode), qps)
}

fn build_with<'f>(f: &'f Fabric, cfg: Config, qps: u32) -> (Vqp<'f>, Vcq<'f>) {
    let data = (0..qps).map(|i| (MockQp { qpn: 100 + i, f }, 0));
    let notify = (cfg.mode == Mode::Spray && qps > 1).then_some((MockQp { qpn: 200, f }, 0));
    let mut vqp = Vqp::new(cfg, data, notify).unwrap();
    let mut vcq = Vcq::new();
    vcq.add_cq(MockCq(f), 0, 1024).unwrap();
    vcq.attach(&mut vqp).unwrap();
    (vqp, vcq)
}

fn write(wr_id: u64, len: u64) -> SendWr {
    SendWr::new(
        wr_id,
        Opcode::RDMA_WRITE,
        0x1000_0000,
        len,
        0x2000_0000,
        Keys::single(1, 2),
    )
}

fn poll<'f>(vcq: &mut Vcq<'f>, vqp: &mut Vqp<'f>) -> Vec<Wc, 64> {
    let mut out = [Wc::EMPTY; 64];
    let n = vcq.poll(&mut [vqp], &mut out).unwrap();
    out[..n].iter().copied().collect()
}

#[test]
fn bad_requests_are_refused_and_post_nothing() {
    let f = Fabric::default();
    let (mut vqp, _) = build(&f, Mode::Dqplb, 4);
    let cases = [
        (write(1, 0), PostSendError::ZeroLength),
        (
            write(1, 10).flags(SendFlags::NONE),
            PostSendError::Unsignaled(Opcode::RDMA_WRITE),
        ),
        (
            SendWr {
                opcode: Opcode(42),
                ..write(1, 10)
            },
            PostSendError::UnknownOpcode(Opcode(42)),
        ),
        (
            SendWr {
                keys: Keys::none().with(1, 1, 2),
                ..write(1, 10)
            },
            PostSendError::MissingKey { device: 0 },
        ),
        (
            SendWr {
                opcode: Opcode::SEND,
                ..write(1, 10)
            },
            PostSendError::SendNeedsSpray,
        ),
    ];
    for (wr, err) in cases {
        assert_eq!(vqp.post_send(&wr), Err(err));
    }
    assert!(f.sends.borrow().is_empty());
    assert_eq!(vqp.sends_in_flight(), 0);
    // An unsignaled WRITE_WITH_IMM may be fragmented.
    let imm = SendWr {
        opcode: Opcode::RDMA_WRITE_WITH_IMM,
        ..write(2, 10).flags(SendFlags::NONE)
    };
    assert_eq!(vqp.post_send(&imm), Ok(()));
}

#[test]
fn pass_through_too_long_is_refused() {
    let f = Fabric::default();
    let (mut vqp, _) = build(&f, Mode::Spray, 1);
    assert_eq!(
        vqp.post_send(&write(1, 3 << 30)),
        Err(PostSendError::TooLong(3 << 30))
    );
    assert!(f.sends.borrow().is_empty());
}

#[test]
fn a_request_of_more_than_u32_max_fragments_is_refused() {
    let f = Fabric::default();
    let cfg = Config {
        split: SplitPolicy::new(1),
        ..config(Mode::Dqplb)
    };
    let (mut vqp, _) = build_with(&f, cfg, 4);
    let len = u64::from(u32::MAX) + 1;
    assert_eq!(
        vqp.post_send(&write(1, len)),
        Err(PostSendError::TooManyFragments {
            len,
            fragments: len
        })
    );
    assert!(f.sends.borrow().is_empty());
    assert_eq!(vqp.sends_in_flight(), 0);
    // One fragment fewer is taken.
    assert_eq!(vqp.post_send(&write(2, len - 1)), Ok(()));
}

/// A request's slot is touched by its post and by each completion: it stays within
/// 168 bytes (it was 184 before the fragment counters became `u32`).
#[test]
fn a_send_slot_stays_small() {
    assert!(core::mem::size_of::<crate::vqp::slots::SendSlot>() <= 168);
}

#[test]
fn one_chain_per_qp_with_only_its_last_wqe_signaled() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 4);
    vqp.post_send(&write(9, 1 << 20)).unwrap();
    let sends = f.sends.borrow().clone();
    assert_eq!(sends.len(), 16);
    assert_eq!(f.send_calls.get(), 4);
    let mut covered = 0u64;
    for (i, (qpn, w)) in sends.iter().enumerate() {
        assert_eq!(w.opcode, Opcode::RDMA_WRITE);
        assert_eq!(w.len, 64 << 10);
        covered += u64::from(w.len);
        assert_eq!(w.addr - 0x1000_0000, w.remote_addr - 0x2000_0000);
        let id = WrId::decode(w.wr_id).unwrap();
        assert_eq!(u32::from(id.lane) + 100, *qpn);
        assert_eq!(id.kind, Kind::Send);
        assert_eq!(w.flags.contains(SendFlags::SIGNALED), i % 4 == 3);
    }
    assert_eq!(covered, 1 << 20);
    for i in f.signaled() {
        f.complete_send(i, WcStatus::SUCCESS);
    }
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].wr_id, 9);
    assert_eq!(wcs[0].byte_len, 1 << 20);
    assert_eq!(wcs[0].qp_num, 77);
    assert_eq!(wcs[0].opcode, WcOpcode::RDMA_WRITE);
}

#[test]
fn completions_are_reported_in_posting_order() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 3);
    for id in 0..3 {
        // One fragment each: request i goes to QP i.
        vqp.post_send(&write(id, 1000)).unwrap();
    }
    let signaled = f.signaled();
    assert_eq!(signaled.len(), 3);
    f.complete_send(signaled[2], WcStatus::SUCCESS);
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    f.complete_send(signaled[0], WcStatus::SUCCESS);
    let first = poll(&mut vcq, &mut vqp);
    assert_eq!(first.iter().map(|w| w.wr_id).collect::<Vec<_, 4>>(), [0]);
    f.complete_send(signaled[1], WcStatus::SUCCESS);
    let rest = poll(&mut vcq, &mut vqp);
    assert_eq!(rest.iter().map(|w| w.wr_id).collect::<Vec<_, 4>>(), [1, 2]);
}

#[test]
fn a_completion_releases_every_earlier_run_on_its_qp() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    for id in 0..3 {
        vqp.post_send(&write(id, 128 << 10)).unwrap();
    }
    let signaled = f.signaled();
    assert_eq!(signaled.len(), 6);
    // QP 0 completes everything with its last CQE; QP 1 lags.
    f.complete_send(signaled[4], WcStatus::SUCCESS);
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    f.complete_send(signaled[1], WcStatus::SUCCESS);
    assert_eq!(poll(&mut vcq, &mut vqp).len(), 1);
    f.complete_send(signaled[5], WcStatus::SUCCESS);
    let rest = poll(&mut vcq, &mut vqp);
    assert_eq!(rest.iter().map(|w| w.wr_id).collect::<Vec<_, 4>>(), [1, 2]);
}

#[test]
fn poll_never_writes_past_the_callers_buffer() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 1);
    for id in 0..5 {
        vqp.post_send(&write(id, 8)).unwrap();
    }
    for i in f.signaled() {
        f.complete_send(i, WcStatus::SUCCESS);
    }
    let mut out = [Wc::EMPTY; 2];
    let mut seen = 0;
    for _ in 0..3 {
        let n = vcq.poll(&mut [&mut vqp], &mut out).unwrap();
        assert!(n <= 2);
        for wc in &out[..n] {
            assert_eq!(wc.wr_id, seen);
            seen += 1;
        }
    }
    assert_eq!(seen, 5);
}

#[test]
fn full_slot_ring_is_backpressure_and_waiting_fragments_go_as_room_frees() {
    let f = Fabric::default();
    let cfg = Config {
        max_outstanding: 2,
        ..config(Mode::Dqplb)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 2);
    for id in 0..16 {
        vqp.post_send(&write(id, 256 << 10)).unwrap();
    }
    assert_eq!(vqp.post_send(&write(16, 1)), Err(PostSendError::Full));
    // 2 QPs × 2 outstanding.
    assert_eq!(f.sends.borrow().len(), 4);
    let mut done = Vec::<u64, 16>::new();
    let mut completed = 0;
    while done.len() < 16 {
        let signaled = f.signaled();
        for &i in &signaled[completed..] {
            f.complete_send(i, WcStatus::SUCCESS);
        }
        completed = signaled.len();
        for wc in poll(&mut vcq, &mut vqp) {
            assert!(wc.status.is_ok());
            done.push(wc.wr_id).unwrap();
        }
    }
    assert!(done.iter().copied().eq(0..16));
    assert_eq!(f.sends.borrow().len(), 64);
}

#[test]
fn dqplb_numbers_with_imm_fragments_only_and_wraps() {
    let f = Fabric::default();
    let cfg = Config {
        send_seq: (1 << 24) - 2,
        ..config(Mode::Dqplb)
    };
    let (mut vqp, _) = build_with(&f, cfg, 2);
    vqp.post_send(&write(1, 100 << 10)).unwrap();
    let imm = SendWr {
        opcode: Opcode::RDMA_WRITE_WITH_IMM,
        ..write(2, 256 << 10)
    };
    vqp.post_send(&imm).unwrap();
    let sends = f.sends.borrow();
    assert_eq!(sends[0].1.opcode, Opcode::RDMA_WRITE);
    assert_eq!(sends[1].1.opcode, Opcode::RDMA_WRITE);
    let words: Vec<u32, 4> = sends[2..]
        .iter()
        .map(|(_, w)| {
            assert_eq!(w.opcode, Opcode::RDMA_WRITE_WITH_IMM);
            u32::from_be(w.imm_data)
        })
        .collect();
    // Chains are per QP: QP 0 took fragments 0 and 2, QP 1 fragments 1 and 3.
    let mut sorted = words.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [0x0000_0000, 0x00ff_fffe, 0x00ff_ffff, 0x8000_0001]);
    assert_eq!(vqp.send_seq().get(), 2);
}

#[test]
fn spray_notify_follows_the_data_in_order_and_is_pipelined() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Spray, 2);
    for id in 0..2 {
        let wr = SendWr {
            opcode: Opcode::RDMA_WRITE_WITH_IMM,
            ..write(id, 64 << 10)
        }
        .imm(0xabcd_0000 + id as u32);
        vqp.post_send(&wr).unwrap();
    }
    // One fragment each, request i on data QP i.
    let data = f.signaled();
    assert_eq!(data.len(), 2);
    assert!(f.sends.borrow().iter().all(|(q, _)| *q != 200));
    // Request 1's data completes first: its notify must wait for request 0's.
    f.complete_send(data[1], WcStatus::SUCCESS);
    poll(&mut vcq, &mut vqp);
    assert!(f.sends.borrow().iter().all(|(q, _)| *q != 200));
    f.complete_send(data[0], WcStatus::SUCCESS);
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    // Both notifies went out together, in order, before either completed.
    let notifies: Vec<SendWqe, 4> = f
        .sends
        .borrow()
        .iter()
        .filter(|(q, _)| *q == 200)
        .map(|(_, w)| *w)
        .collect();
    assert_eq!(notifies.len(), 2);
    for (i, n) in notifies.iter().enumerate() {
        assert_eq!(n.opcode, Opcode::RDMA_WRITE_WITH_IMM);
        assert_eq!(n.len, 0);
        assert_eq!(n.imm_data, 0xabcd_0000 + i as u32);
    }
    let last = f.sends.borrow().len() - 1;
    f.complete_send(last, WcStatus::SUCCESS);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_, 4>>(), [0, 1]);
}

#[test]
fn a_failed_qp_fails_every_outstanding_request_once() {
    let f = Fabric::default();
    let cfg = Config {
        max_outstanding: 2,
        ..config(Mode::Dqplb)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 2);
    for id in 0..4 {
        vqp.post_send(&write(id, 128 << 10)).unwrap();
    }
    // Requests 0 and 1 are posted (4 WQEs); 2 and 3 wait.
    assert_eq!(f.sends.borrow().len(), 4);
    let signaled = f.signaled();
    f.complete_send(signaled[0], WcStatus::SUCCESS);
    f.complete_send(signaled[1], WcStatus::RETRY_EXC_ERR);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(vqp.failure(), Some(WcStatus::RETRY_EXC_ERR));
    assert_eq!(f.errored.borrow().len(), 2, "every QP was moved to error");
    assert_eq!(
        vqp.post_send(&write(9, 8)),
        Err(PostSendError::Failed(WcStatus::RETRY_EXC_ERR))
    );
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (0, WcStatus::RETRY_EXC_ERR));
    // The provider flushes what was outstanding.
    for &i in &signaled[2..] {
        f.complete_send(i, WcStatus::WR_FLUSH_ERR);
    }
    let wcs = poll(&mut vcq, &mut vqp);
    let ids: Vec<(u64, WcStatus), 4> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        [
            (1, WcStatus::WR_FLUSH_ERR),
            (2, WcStatus::WR_FLUSH_ERR),
            (3, WcStatus::WR_FLUSH_ERR)
        ]
    );
    assert_eq!(
        f.sends.borrow().len(),
        4,
        "nothing posted after the failure"
    );
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    assert_eq!(vqp.sends_in_flight(), 0);
}

#[test]
fn a_qp_failed_by_an_event_fails_the_virtual_qp_and_another_qp_does_not() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    for id in 0..2 {
        vqp.post_send(&write(id, 128 << 10)).unwrap();
    }
    let qpn = vqp.data_qp_num(1).unwrap();
    assert!(!vqp.fail_qp(qpn + 1000, 0, WcStatus::FATAL_ERR), "not ours");
    assert!(
        !vqp.fail_qp(qpn, 1, WcStatus::FATAL_ERR),
        "ours, but not on device 1"
    );
    assert!(!vqp.fail_device(1, WcStatus::FATAL_ERR));
    assert_eq!(vqp.failure(), None);
    assert!(f.errored.borrow().is_empty());
    assert!(vqp.fail_qp(qpn, 0, WcStatus::FATAL_ERR));
    assert_eq!(vqp.failure(), Some(WcStatus::FATAL_ERR));
    assert_eq!(f.errored.borrow().len(), 2, "every QP was moved to error");
    assert_eq!(
        vqp.post_send(&write(9, 8)),
        Err(PostSendError::Failed(WcStatus::FATAL_ERR))
    );
    // The provider flushes what was posted; each request is reported once.
    for i in f.signaled() {
        f.complete_send(i, WcStatus::WR_FLUSH_ERR);
    }
    let wcs = poll(&mut vcq, &mut vqp);
    let ids: Vec<u64, 4> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [0, 1]);
    assert!(wcs.iter().all(|w| !w.status.is_ok()));
    assert_eq!(vqp.sends_in_flight(), 0);
    // A later event changes nothing (the first error stays).
    assert!(vqp.fail_device(0, WcStatus::RETRY_EXC_ERR));
    assert_eq!(vqp.failure(), Some(WcStatus::FATAL_ERR));
}

#[test]
fn a_refused_post_fails_the_request_not_the_caller() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    f.refuse.set(true);
    assert_eq!(vqp.post_send(&write(5, 128 << 10)), Ok(()));
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::POST_ERR);
    assert_eq!(vqp.failure(), Some(WcStatus::POST_ERR));
}

#[test]
fn dqplb_receiver_completes_notification_receives_in_order() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    vqp.arm_receiver();
    assert_eq!(f.recvs.borrow().len(), 8, "recv_depth on each data QP");
    assert!(f.recvs.borrow().iter().all(|(_, r)| r.len == 0));
    vqp.post_recv(&RecvWr::notification(10)).unwrap();
    // Message A = seq 0..=1, message B = seq 2; B's fragment arrives first.
    f.arrive(101, 2, true, 7);
    f.arrive(101, 1, true, 5);
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    f.arrive(100, 0, false, 3);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].wr_id, 10);
    assert_eq!(wcs[0].byte_len, 8);
    assert_eq!(wcs[0].imm_data, None);
    assert_eq!(wcs[0].opcode, WcOpcode::RECV_RDMA_WITH_IMM);
    // Message B waited for a receive; it completes this one at once.
    vqp.post_recv(&RecvWr::notification(11)).unwrap();
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (11, 7));
    // Each consumed receive was replenished.
    assert_eq!(f.recvs.borrow().len(), 11);
    assert_eq!(
        vqp.post_recv(&RecvWr::data(12, 0, 8, 1)),
        Err(PostRecvError::DataNeedsSpray)
    );
}

#[test]
fn dqplb_protocol_errors_fail_waiting_receives() {
    for bad in [0x0100_0000u32, 60] {
        let f = Fabric::default();
        let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
        vqp.arm_receiver();
        vqp.post_recv(&RecvWr::notification(1)).unwrap();
        if bad == 60 {
            // A window of 128 seen from 0 ends at 127: 128 + 60 is outside.
            f.arrive(100, 128 + 60, true, 1);
        } else {
            let wr_id = f.recvs.borrow()[0].1.wr_id;
            f.push(PhysWc {
                wr_id,
                status: WcStatus::SUCCESS,
                opcode: WcOpcode::RECV_RDMA_WITH_IMM,
                qp_num: 100,
                byte_len: 1,
                imm_data: Some(bad.to_be()),
            });
        }
        let wcs = poll(&mut vcq, &mut vqp);
        assert_eq!(wcs.len(), 1);
        assert_eq!(wcs[0].status, WcStatus::PROTOCOL_ERR);
        assert_eq!(vqp.failure(), Some(WcStatus::PROTOCOL_ERR));
    }
}

#[test]
fn spray_receiver_posts_on_the_notify_qp_and_passes_the_immediate() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Spray, 2);
    for id in 0..6 {
        vqp.post_recv(&RecvWr::notification(id)).unwrap();
    }
    // recv_depth 4: two wait in the FIFO.
    assert_eq!(f.recvs.borrow().len(), 4);
    assert!(f.recvs.borrow().iter().all(|(q, _)| *q == 200));
    for i in 0..2 {
        let wr_id = f.recvs.borrow()[i].1.wr_id;
        f.push(PhysWc {
            wr_id,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::RECV_RDMA_WITH_IMM,
            qp_num: 200,
            byte_len: 0,
            imm_data: Some(0x55 + i as u32),
        });
    }
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs.len(), 2);
    assert_eq!(wcs[1].imm_data, Some(0x56));
    assert_eq!(
        f.recvs.borrow().len(),
        6,
        "the waiting receives went as room freed"
    );
}

#[test]
fn stray_completions_are_counted_not_routed() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    vqp.post_send(&write(1, 8)).unwrap();
    let mut wc = PhysWc {
        wr_id: f.sends.borrow()[0].1.wr_id,
        qp_num: 999,
        ..PhysWc::EMPTY
    };
    f.push(wc);
    wc.wr_id = u64::MAX;
    f.push(wc);
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    assert_eq!(vcq.strays(), 2);
    assert_eq!(vqp.sends_in_flight(), 1);
}

#[test]
fn cq_sizing_is_checked_at_attach() {
    let f = Fabric::default();
    let data = (0..4).map(|i| (MockQp { qpn: i, f: &f }, 0));
    let mut vqp = Vqp::new(config(Mode::Dqplb), data, None).unwrap();
    let mut vcq = Vcq::new();
    vcq.add_cq(MockCq(&f), 0, 79).unwrap();
    assert_eq!(
        vcq.attach(&mut vqp),
        Err(CqError::TooSmall {
            device: 0,
            capacity: 79,
            needed: 80
        })
    );
    let mut other = Vcq::new();
    other.add_cq(MockCq(&f), 1, 1000).unwrap();
    assert_eq!(other.attach(&mut vqp), Err(CqError::NoCq(0)));
}

#[test]
fn build_errors_are_reported() {
    let f = Fabric::default();
    let qp = |n| (MockQp { qpn: n, f: &f }, 0u8);
    assert!(matches!(
        Vqp::new(config(Mode::Spray), [qp(1), qp(2)], None),
        Err(BuildError::NotifyQp { given: false })
    ));
    assert!(matches!(
        Vqp::new(config(Mode::Dqplb), [qp(1), qp(2)], Some(qp(3))),
        Err(BuildError::NotifyQp { given: true })
    ));
    assert!(matches!(
        Vqp::new(
            config(Mode::Dqplb),
            [qp(1), qp(2), qp(3), qp(4), qp(5)],
            None
        ),
        Err(BuildError::DataQps { given: 5, .. })
    ));
    let cfg = Config {
        max_outstanding: 17,
        ..config(Mode::Dqplb)
    };
    assert!(matches!(
        Vqp::new(cfg, [qp(1)], None),
        Err(BuildError::MaxOutstanding { given: 17, .. })
    ));
}

#[test]
fn a_stalled_qp_holds_back_dqplb_numbering_within_the_window() {
    let f = Fabric::default();
    let cfg = Config {
        split: SplitPolicy::new(1),
        max_outstanding: 4,
        recv_depth: 4,
        ..config(Mode::Dqplb)
    };
    // 2 QPs: window 128, of which 2 × 4 receives may sit unprocessed at the peer.
    let (mut vqp, mut vcq) = build_with(&f, cfg, 2);
    let imm = SendWr {
        opcode: Opcode::RDMA_WRITE_WITH_IMM,
        ..write(1, 1000)
    };
    vqp.post_send(&imm).unwrap();
    // QP 0 never completes; QP 1 completes everything it gets.
    let mut done = 0;
    loop {
        let sends = f.sends.borrow().clone();
        let fresh: Vec<usize, 512> = (done..sends.len())
            .filter(|&i| sends[i].0 == 101 && sends[i].1.flags.contains(SendFlags::SIGNALED))
            .collect();
        done = sends.len();
        if fresh.is_empty() {
            break;
        }
        for i in fresh {
            f.complete_send(i, WcStatus::SUCCESS);
        }
        poll(&mut vcq, &mut vqp);
    }
    let highest = f
        .sends
        .borrow()
        .iter()
        .map(|(_, w)| u32::from_be(w.imm_data) & 0xff_ffff)
        .max()
        .unwrap();
    // The oldest outstanding number is 0 (on QP 0): nothing reaches 128 - 8.
    assert_eq!(highest, 128 - 8 - 1);
    assert_eq!(vqp.send_seq().get(), 128 - 8);
}

#[test]
fn a_window_too_small_for_the_depths_is_refused() {
    let f = Fabric::default();
    let cfg = Config {
        recv_depth: 17,
        ..config(Mode::Dqplb)
    };
    let data = (0..4).map(|i| (MockQp { qpn: i, f: &f }, 0));
    assert!(matches!(
        Vqp::new(cfg, data, None),
        Err(BuildError::Window {
            window: 128,
            needed: 132
        })
    ));
}

#[test]
fn shutting_down_reports_everything_outstanding_once() {
    let f = Fabric::default();
    let cfg = Config {
        max_outstanding: 1,
        ..config(Mode::Spray)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 2);
    for id in 0..3 {
        vqp.post_send(&write(id, 128 << 10)).unwrap();
    }
    vqp.post_recv(&RecvWr::notification(7)).unwrap();
    vqp.shut_down();
    assert_eq!(f.errored.borrow().len(), 3, "data QPs and notify QP");
    // The provider flushes the posted WQEs (one per QP: request 0's fragments and the receive).
    for i in 0..2 {
        f.complete_send(i, WcStatus::WR_FLUSH_ERR);
    }
    let wr_id = f.recvs.borrow()[0].1.wr_id;
    f.push(PhysWc {
        wr_id,
        status: WcStatus::WR_FLUSH_ERR,
        qp_num: 200,
        ..PhysWc::EMPTY
    });
    let wcs = poll(&mut vcq, &mut vqp);
    let ids: Vec<(u64, WcOpcode), 4> = wcs.iter().map(|w| (w.wr_id, w.opcode)).collect();
    assert_eq!(
        ids,
        [
            (0, WcOpcode::RDMA_WRITE),
            (1, WcOpcode::RDMA_WRITE),
            (2, WcOpcode::RDMA_WRITE),
            (7, WcOpcode::RECV_RDMA_WITH_IMM)
        ]
    );
    assert!(wcs.iter().all(|w| w.status == WcStatus::WR_FLUSH_ERR));
    assert_eq!(vqp.sends_in_flight() + vqp.recvs_in_flight(), 0);
    assert_eq!(
        vqp.post_send(&write(9, 1)),
        Err(PostSendError::Failed(WcStatus::WR_FLUSH_ERR))
    );
}

#[test]
fn a_dqplb_receiver_that_falls_behind_holds_the_sender_back() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Dqplb, 2);
    vqp.arm_receiver();
    assert_eq!(f.recvs.borrow().len(), 8);
    // 16 one-fragment messages arrive and no receive waits for them.
    for seq in 0..16 {
        f.arrive(100 + seq % 2, seq, true, 10);
        poll(&mut vcq, &mut vqp);
    }
    // 16 slots: 8 receives went back after the first 8 messages, then none.
    assert_eq!(f.recvs.borrow().len(), 16);
    assert_eq!(vqp.failure(), None);
    // Each receive the application posts takes a held message and frees a slot.
    vqp.post_recv(&RecvWr::notification(1)).unwrap();
    assert_eq!(f.recvs.borrow().len(), 17);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (1, 10));
}

/// Everything of a posted WQE but its `SIGNALED` bit, with the QP it went to.
fn placement(sends: &[(u32, SendWqe)]) -> Vec<(u32, SendWqe), 64> {
    sends
        .iter()
        .map(|&(qpn, w)| {
            let flags = SendFlags(w.flags.0 & !SendFlags::SIGNALED.0);
            (qpn, SendWqe { flags, ..w })
        })
        .collect()
}

#[test]
fn a_request_spread_in_one_go_lands_exactly_as_fragment_by_fragment() {
    // A round stages a request's fragments QP by QP when every QP has room for its
    // share; with the spread turned off it goes fragment by fragment. Both must post
    // the same WQEs to the same QPs with the same sequence numbers, whichever
    // signaling (which changes the runs: one per QP's share, or one per WQE).
    let requests = [
        (Opcode::RDMA_WRITE_WITH_IMM, 1000, 0x2000_0000),
        (Opcode::RDMA_WRITE_WITH_IMM, 5 << 16, 0x2000_0000),
        (Opcode::RDMA_WRITE_WITH_IMM, (9 << 16) + 77, 0x2000_1234),
        (Opcode::RDMA_WRITE, 3 << 16, 0x2000_0010),
        (Opcode::RDMA_READ, (2 << 16) + 1, 0x2000_0000),
        (Opcode::RDMA_WRITE_WITH_IMM, 2 << 16, 0x2000_0000),
    ];
    let run = |signaling, one_by_one| {
        let f = Fabric::default();
        let cfg = Config {
            signaling,
            send_seq: (1 << 24) - 5,
            split: SplitPolicy {
                align: 4096,
                ..SplitPolicy::new(64 << 10)
            },
            ..config(Mode::Dqplb)
        };
        let (mut vqp, _) = build_with(&f, cfg, 4);
        vqp.one_by_one = one_by_one;
        for (i, &(opcode, len, remote)) in requests.iter().enumerate() {
            let flags = if i % 2 == 0 {
                SendFlags::SIGNALED.with(SendFlags::SOLICITED)
            } else {
                SendFlags::SIGNALED.with(SendFlags::FENCE)
            };
            let wr = SendWr {
                opcode,
                remote_addr: remote,
                flags,
                ..write(i as u64, len)
            };
            vqp.post_send(&wr).unwrap();
        }
        let sends = placement(&f.sends.borrow());
        (sends, vqp.send_seq())
    };
    let (one_by_one, seq_one) = run(Signaling::LastOfChain, true);
    assert_eq!(one_by_one.len(), 1 + 5 + 11 + 3 + 3 + 2);
    for signaling in [Signaling::LastOfChain, Signaling::Every] {
        let (spread, seq_spread) = run(signaling, false);
        assert_eq!(seq_spread, seq_one);
        // Chains are per QP, so compare each QP's WQEs in order.
        for qpn in 100..104 {
            let of = |v: &[(u32, SendWqe)]| {
                v.iter()
                    .filter(|(q, _)| *q == qpn)
                    .map(|(_, w)| *w)
                    .collect::<Vec<_, 64>>()
            };
            assert_eq!(of(&spread), of(&one_by_one), "QP {qpn}, {signaling:?}");
        }
    }
}

#[test]
fn with_every_wqe_signaled_a_spread_request_waits_for_each_fragment() {
    // 8 fragments over 4 QPs, staged two per QP in one go: each WQE is its own run,
    // so each completion credits one fragment, and none is a stray.
    let f = Fabric::default();
    let cfg = Config {
        signaling: Signaling::Every,
        ..config(Mode::Dqplb)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 4);
    vqp.post_send(&write(9, 8 << 16)).unwrap();
    let signaled = f.signaled();
    assert_eq!((signaled.len(), f.sends.borrow().len()), (8, 8));
    // Each QP's chain is posted whole, so the last WQE is QP 103's second.
    for &i in &signaled[..7] {
        f.complete_send(i, WcStatus::SUCCESS);
    }
    assert!(poll(&mut vcq, &mut vqp).is_empty());
    f.complete_send(signaled[7], WcStatus::SUCCESS);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!((wcs.len(), wcs[0].wr_id), (1, 9));
    assert_eq!((vqp.strays(), vqp.sends_in_flight()), (0, 0));
}

#[test]
fn one_fragment_requests_posted_straight_away_stay_within_the_window() {
    // 2 QPs, window 64, of which 2 × 28 receives may sit unprocessed at the peer:
    // 8 sequence numbers may be in flight.
    type Narrow<'f> = VirtualQp<MockQp<'f>, 4, 16, 64, 64>;
    let f = Fabric::default();
    let cfg = Config {
        max_outstanding: 4,
        recv_depth: 28,
        ..config(Mode::Dqplb)
    };
    let data = (0..2).map(|i| {
        (
            MockQp {
                qpn: 100 + i,
                f: &f,
            },
            0,
        )
    });
    let mut vqp = Narrow::new(cfg, data, None).unwrap();
    let mut vcq = Vcq::new();
    vcq.add_cq(MockCq(&f), 0, 1024).unwrap();
    vcq.attach(&mut vqp).unwrap();
    let mut done = 0;
    let mut out = [Wc::EMPTY; 8];
    for i in 0..15 {
        let imm = SendWr {
            opcode: Opcode::RDMA_WRITE_WITH_IMM,
            ..write(i, 1000)
        };
        vqp.post_send(&imm).unwrap();
        // QP 0 never completes; QP 1 completes everything it gets.
        let sends = f.sends.borrow().clone();
        for (k, (qpn, _)) in sends.iter().enumerate().skip(done) {
            if *qpn == 101 {
                f.complete_send(k, WcStatus::SUCCESS);
            }
        }
        done = sends.len();
        vcq.poll(&mut [&mut vqp], &mut out).unwrap();
    }
    let sends = f.sends.borrow();
    let seqs: Vec<u32, 16> = sends
        .iter()
        .map(|(_, w)| u32::from_be(w.imm_data) & 0xff_ffff)
        .collect();
    assert_eq!(seqs.len(), 8, "{seqs:?}");
    assert_eq!(seqs.iter().max(), Some(&7));
    assert_eq!(vqp.send_seq().get(), 8);
    assert_eq!(vqp.sends_in_flight(), 15);
}

mod striping;

mod failover;
