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
    /// The inline payloads posted, copied at post time.
    inline: RefCell<Vec<u8, 256>>,
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
    /// Records the chain, and copies inline payloads during the call as a provider
    /// does.
    unsafe fn post_send(&mut self, wqes: &[SendWqe]) -> Result<(), PostFailure> {
        if self.f.refuse.get() {
            return Err(PostFailure {
                posted: 0,
                errno: 12,
            });
        }
        self.f.send_calls.set(self.f.send_calls.get() + 1);
        for w in wqes {
            self.f.sends.borrow_mut().push((self.qpn, *w)).unwrap();
            if w.flags.contains(SendFlags::INLINE) && w.len != 0 {
                // SAFETY: the post contract: an inline payload is initialised memory
                // of this process, readable during the call.
                let bytes =
                    unsafe { core::slice::from_raw_parts(w.addr as *const u8, w.len as usize) };
                self.f.inline.borrow_mut().extend_from_slice(bytes).unwrap();
            }
        }
        Ok(())
    }
    unsafe fn post_recv(&mut self, wqes: &[RecvWqe]) -> Result<(), PostFailure> {
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

mod build;
mod failover;
mod failure;
mod inline;
mod numbering;
mod recv;
mod send;
mod spread;
mod striping;
