//! A no-op provider: queue pairs that move no data, for benches of the engine.
//!
//! A post records the completions it owes — one success per `SIGNALED` send WQE, and
//! one per receive in [`RecvMode::Complete`] — into fixed storage shared with the
//! [`NoopCq`]; a poll hands them back. [`NoopOrder::Shuffled`] hands them back in a
//! seeded random interleaving across QPs that keeps each QP's own order. Receive-side
//! benches hold receives ([`RecvMode::Hold`]) and deliver arrivals with
//! [`NoopControl::deliver_imm`], or inject any completion with [`NoopControl::inject`].
//!
//! Storage is sized at construction (the CQ) and when a QP is created; posting and
//! polling never allocate. Completions beyond the capacity are counted in
//! [`NoopCq::overflows`] and dropped, never a reallocation.
//!
//! ```
//! use vqp_core::{Opcode, PhysCq, PhysWc, SendFlags, SendWqe};
//! use vqp_sim::noop::{NoopConfig, NoopCq};
//!
//! let mut cq = NoopCq::new(NoopConfig::default());
//! let mut qp = cq.create_qp(7);
//! let wqe = SendWqe { wr_id: 1, opcode: Opcode::RDMA_WRITE, flags: SendFlags::SIGNALED, len: 64, ..Default::default() };
//! qp.post_send(&[wqe, SendWqe { wr_id: 2, ..wqe }]).unwrap();
//! let mut out = [PhysWc::EMPTY; 4];
//! assert_eq!(cq.poll(&mut out), Ok(2));
//! assert_eq!((out[0].wr_id, out[0].qp_num, out[1].wr_id), (1, 7, 2));
//! ```

mod ring;

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use vqp_core::{
    PhysCq, PhysQp, PhysWc, PollFailure, PostFailure, RecvWqe, SendFlags, SendWqe, WcOpcode,
    WcStatus,
};

use crate::nic::rng::Lcg64;
use ring::Ring;

/// The order in which a [`NoopCq`] hands completions back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NoopOrder {
    /// Posting order across all QPs.
    #[default]
    Fifo,
    /// Each completion comes from a QP chosen at random (seeded): a QP is drawn
    /// uniformly and, if it has nothing waiting, the next one (in creation order,
    /// wrapping) that has. Each QP's own order is kept. At most 64 QPs per CQ.
    Shuffled {
        /// Seed of the interleaving.
        seed: u64,
    },
}

/// What posting a receive does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecvMode {
    /// The receive completes at once as a successful `RECV` of 0 bytes.
    #[default]
    Complete,
    /// The receive is held until [`NoopControl::deliver_imm`] consumes it.
    Hold,
}

/// Sizes and behaviour of a no-op CQ and its QPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoopConfig {
    /// Completions the CQ holds at most (across its QPs).
    pub capacity: usize,
    /// Receives each QP holds at most in [`RecvMode::Hold`].
    pub recv_capacity: usize,
    /// Order of completions.
    pub order: NoopOrder,
    /// What posting a receive does.
    pub recv_mode: RecvMode,
}

impl Default for NoopConfig {
    /// 4096 completions, 4096 held receives per QP, FIFO order, receives complete at once.
    fn default() -> Self {
        Self {
            capacity: 4096,
            recv_capacity: 4096,
            order: NoopOrder::Fifo,
            recv_mode: RecvMode::Complete,
        }
    }
}

/// Why a [`NoopControl`] call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoopError {
    /// No QP of this CQ has this number.
    UnknownQp(u32),
    /// The QP holds no receive to consume.
    NoReceive,
    /// The CQ is full (the completion was dropped and counted).
    Full,
}

impl fmt::Display for NoopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownQp(n) => write!(f, "no no-op QP {n:#x}"),
            Self::NoReceive => f.write_str("no receive held"),
            Self::Full => f.write_str("no-op CQ full"),
        }
    }
}

impl std::error::Error for NoopError {}

#[derive(Debug)]
struct QpSlot {
    qp_num: u32,
    /// This QP's completions ([`NoopOrder::Shuffled`] only; empty otherwise).
    done: Ring<PhysWc>,
    /// Held receives' wr_ids ([`RecvMode::Hold`] only; empty otherwise).
    recvs: Ring<u64>,
}

#[derive(Debug)]
struct Shared {
    config: NoopConfig,
    rng: Lcg64,
    /// All completions in posting order ([`NoopOrder::Fifo`] only).
    fifo: Ring<PhysWc>,
    qps: Vec<QpSlot>,
    /// Completions waiting, in whichever rings hold them.
    queued: usize,
    /// Bit `i` set when QP slot `i` has completions waiting ([`NoopOrder::Shuffled`]
    /// only).
    waiting: u64,
    /// Completions waiting per QP slot ([`NoopOrder::Shuffled`] only): a pick reads
    /// its count here, one load, rather than its ring's two indices.
    counts: [u32; 64],
    overflows: u64,
}

impl Shared {
    /// Stores a completion of QP slot `qp`; counts an overflow when full.
    #[inline]
    fn record(&mut self, qp: usize, wc: PhysWc) -> bool {
        if self.config.order == NoopOrder::Fifo {
            self.record_fifo(wc)
        } else {
            self.record_shuffled(qp, wc)
        }
    }

    /// [`Self::record`] for shuffled order: the QP's own ring, the CQ's capacity
    /// bounding the count across rings. (A chain's post does the same for all its
    /// signaled WQEs at once: [`Self::post_shuffled`].)
    #[inline]
    fn record_shuffled(&mut self, qp: usize, wc: PhysWc) -> bool {
        if self.queued >= self.config.capacity {
            self.overflows += 1;
            return false;
        }
        let ok = self.qps[qp].done.push(wc);
        debug_assert!(ok, "rings hold the whole capacity");
        self.waiting |= 1 << qp;
        self.counts[qp] += 1;
        self.queued += 1;
        true
    }

    /// [`Self::record`] for FIFO order, where the ring (of the CQ's capacity) alone
    /// bounds the count.
    #[inline]
    fn record_fifo(&mut self, wc: PhysWc) -> bool {
        let ok = self.fifo.push(wc);
        if ok {
            self.queued += 1;
        } else {
            self.overflows += 1;
        }
        ok
    }

    fn slot(&self, qp_num: u32) -> Result<usize, NoopError> {
        self.qps
            .iter()
            .position(|q| q.qp_num == qp_num)
            .ok_or(NoopError::UnknownQp(qp_num))
    }
}

/// A no-op completion queue; create its QPs with [`NoopCq::create_qp`].
#[derive(Debug)]
pub struct NoopCq {
    shared: Rc<RefCell<Shared>>,
}

impl NoopCq {
    /// A CQ with storage for `config.capacity` completions.
    pub fn new(config: NoopConfig) -> Self {
        let (fifo_cap, seed) = match config.order {
            NoopOrder::Fifo => (config.capacity, 0),
            NoopOrder::Shuffled { seed } => (0, seed),
        };
        let shared = Shared {
            config,
            rng: Lcg64::new(seed),
            fifo: Ring::new(fifo_cap, PhysWc::EMPTY),
            qps: Vec::new(),
            queued: 0,
            waiting: 0,
            counts: [0; 64],
            overflows: 0,
        };
        Self {
            shared: Rc::new(RefCell::new(shared)),
        }
    }

    /// A QP reporting `qp_num` whose completions go to this CQ. Allocates its storage
    /// now; a QP number already used on this CQ would make completions ambiguous, so
    /// choose distinct ones.
    ///
    /// # Panics
    /// When a CQ in [`NoopOrder::Shuffled`] would get a 65th QP (its picks keep one
    /// bit per QP).
    pub fn create_qp(&self, qp_num: u32) -> NoopQp {
        let mut sh = self.shared.borrow_mut();
        let done_cap = match sh.config.order {
            NoopOrder::Fifo => 0,
            NoopOrder::Shuffled { .. } => {
                assert!(
                    sh.qps.len() < 64,
                    "a shuffled no-op CQ serves at most 64 QPs"
                );
                sh.config.capacity
            }
        };
        let recv_cap = match sh.config.recv_mode {
            RecvMode::Complete => 0,
            RecvMode::Hold => sh.config.recv_capacity,
        };
        sh.qps.push(QpSlot {
            qp_num,
            done: Ring::new(done_cap, PhysWc::EMPTY),
            recvs: Ring::new(recv_cap, 0),
        });
        NoopQp {
            shared: self.shared.clone(),
            slot: sh.qps.len() - 1,
            qp_num,
        }
    }

    /// A handle for injecting completions while the CQ and QPs are lent to an engine.
    pub fn control(&self) -> NoopControl {
        NoopControl {
            shared: self.shared.clone(),
        }
    }

    /// Completions dropped because the CQ was full.
    pub fn overflows(&self) -> u64 {
        self.shared.borrow().overflows
    }

    /// Completions waiting to be polled.
    pub fn queued(&self) -> usize {
        self.shared.borrow().queued
    }
}

impl PhysCq for NoopCq {
    /// Hands back up to `out.len()` recorded completions. Never fails or allocates.
    fn poll(&mut self, out: &mut [PhysWc]) -> Result<usize, PollFailure> {
        let mut sh = self.shared.borrow_mut();
        if sh.config.order != NoopOrder::Fifo {
            return Ok(sh.poll_shuffled(out));
        }
        let n = sh.fifo.pop_into(out);
        sh.queued -= n;
        Ok(n)
    }
}

impl Shared {
    /// [`NoopCq::poll`] in shuffled order. Out of line, so that the FIFO path stays
    /// as short as a no-op provider's should be.
    ///
    /// Each pick draws a QP slot `k` and takes the first slot at or after it (wrapping)
    /// whose bit is set in `waiting`, without a branch on the random draw: a
    /// mispredicted branch, or a scan of the QPs, would cost more than the no-op
    /// provider is meant to add. The draws do not depend on the picks, so successive
    /// draws overlap. A QP's bit is cleared behind a branch on its count reaching
    /// zero, which follows the benches' patterns (it is taken on every pick when each
    /// QP holds one completion, rarely when each holds many): computed without a
    /// branch, the next pick waited on this pick's count, a load, every time.
    #[inline(never)]
    fn poll_shuffled(&mut self, out: &mut [PhysWc]) -> usize {
        let n = self.queued.min(out.len());
        let slots = self.qps.len();
        for o in &mut out[..n] {
            // Rotated right by k, slot k's bit is bit 0 and the slots before it (all
            // below 64) wrap to the top: the lowest set bit is the pick, k places on.
            let k = self.rng.below(slots);
            let pick = (k + self.waiting.rotate_right(k as u32).trailing_zeros() as usize) & 63;
            self.qps[pick].done.pop_oldest_into(o);
            let left = &mut self.counts[pick];
            *left -= 1;
            if *left == 0 {
                self.waiting &= !(1 << pick);
            }
        }
        self.queued -= n;
        n
    }

    /// [`NoopQp::post_send`] in shuffled order: the completions of the chain's
    /// signaled WQEs go to QP slot `qp`'s ring, which is looked up once, as is the
    /// room left under the CQ's capacity. Inlined there: as a call it cost each chain
    /// ~30 more instructions, and inlined it adds 4 to the FIFO path's request.
    #[inline]
    fn post_shuffled(&mut self, qp: usize, qp_num: u32, wqes: &[SendWqe]) {
        let room = self.config.capacity.saturating_sub(self.queued);
        let done = &mut self.qps[qp].done;
        let mut added = 0;
        for w in wqes {
            if w.flags.contains(SendFlags::SIGNALED) {
                if added < room {
                    done.push_unchecked(send_completion(w, qp_num));
                    added += 1;
                } else {
                    self.overflows += 1;
                }
            }
        }
        self.queued += added;
        self.counts[qp] += added as u32;
        self.waiting |= u64::from(added > 0) << qp;
    }
}

/// The successful completion of send WQE `w` on the QP numbered `qp_num`.
#[inline]
fn send_completion(w: &SendWqe, qp_num: u32) -> PhysWc {
    PhysWc {
        wr_id: w.wr_id,
        status: WcStatus::SUCCESS,
        opcode: w.opcode.completion(),
        qp_num,
        byte_len: w.len,
        imm_data: None,
    }
}

/// A no-op queue pair: posting records completions, nothing else.
#[derive(Debug)]
pub struct NoopQp {
    shared: Rc<RefCell<Shared>>,
    slot: usize,
    qp_num: u32,
}

/// Safe posts: the no-op provider reads and writes no memory at the
/// WQEs' addresses.
impl NoopQp {
    /// Records a success for each `SIGNALED` WQE (opcode from the request, `byte_len`
    /// its length). Always accepts the whole chain; a full CQ counts overflows.
    pub fn post_send(&mut self, wqes: &[SendWqe]) -> Result<(), PostFailure> {
        let mut sh = self.shared.borrow_mut();
        if sh.config.order != NoopOrder::Fifo {
            sh.post_shuffled(self.slot, self.qp_num, wqes);
            return Ok(());
        }
        for w in wqes {
            if w.flags.contains(SendFlags::SIGNALED) {
                sh.record_fifo(send_completion(w, self.qp_num));
            }
        }
        Ok(())
    }

    /// Completes each receive at once ([`RecvMode::Complete`]) or holds it
    /// ([`RecvMode::Hold`]; a full receive ring counts an overflow). Always accepts.
    pub fn post_recv(&mut self, wqes: &[RecvWqe]) -> Result<(), PostFailure> {
        let mut sh = self.shared.borrow_mut();
        for r in wqes {
            match sh.config.recv_mode {
                RecvMode::Complete => {
                    sh.record(
                        self.slot,
                        PhysWc {
                            wr_id: r.wr_id,
                            status: WcStatus::SUCCESS,
                            opcode: WcOpcode::RECV,
                            qp_num: self.qp_num,
                            byte_len: 0,
                            imm_data: None,
                        },
                    );
                }
                RecvMode::Hold => {
                    if !sh.qps[self.slot].recvs.push(r.wr_id) {
                        sh.overflows += 1;
                    }
                }
            }
        }
        Ok(())
    }
}

// The trait's posts are `unsafe fn`s (vqp-core's post contract); these bodies do no
// unsafe operation.
#[allow(unsafe_code)]
impl PhysQp for NoopQp {
    fn qp_num(&self) -> u32 {
        self.qp_num
    }

    /// [`NoopQp::post_send`], which is safe on this provider.
    ///
    /// # Safety
    /// The trait's; this provider needs none of it (any WQE is sound here).
    unsafe fn post_send(&mut self, wqes: &[SendWqe]) -> Result<(), PostFailure> {
        NoopQp::post_send(self, wqes)
    }

    /// [`NoopQp::post_recv`], which is safe on this provider.
    ///
    /// # Safety
    /// The trait's; this provider needs none of it (any WQE is sound here).
    unsafe fn post_recv(&mut self, wqes: &[RecvWqe]) -> Result<(), PostFailure> {
        NoopQp::post_recv(self, wqes)
    }

    /// Does nothing: a no-op QP has no state to fail.
    fn set_error(&mut self) {}
}

/// Injects completions into a [`NoopCq`]; clones share it.
#[derive(Clone, Debug)]
pub struct NoopControl {
    shared: Rc<RefCell<Shared>>,
}

impl NoopControl {
    /// Queues `wc` as a completion of the QP numbered `wc.qp_num`, as if the hardware
    /// had produced it.
    pub fn inject(&self, wc: PhysWc) -> Result<(), NoopError> {
        let mut sh = self.shared.borrow_mut();
        let slot = sh.slot(wc.qp_num)?;
        if sh.record(slot, wc) {
            Ok(())
        } else {
            Err(NoopError::Full)
        }
    }

    /// Consumes the oldest held receive of QP `qp_num` and queues a successful
    /// `RECV_RDMA_WITH_IMM` for it with `imm_data` (network byte order, verbatim) and
    /// `byte_len`; returns the receive's wr_id. Allocates nothing.
    pub fn deliver_imm(&self, qp_num: u32, imm_data: u32, byte_len: u32) -> Result<u64, NoopError> {
        let mut sh = self.shared.borrow_mut();
        let slot = sh.slot(qp_num)?;
        let wr_id = sh.qps[slot].recvs.pop().ok_or(NoopError::NoReceive)?;
        let wc = PhysWc {
            wr_id,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::RECV_RDMA_WITH_IMM,
            qp_num,
            byte_len,
            imm_data: Some(imm_data),
        };
        if sh.record(slot, wc) {
            Ok(wr_id)
        } else {
            Err(NoopError::Full)
        }
    }

    /// Receives QP `qp_num` holds ([`RecvMode::Hold`]).
    pub fn held_recvs(&self, qp_num: u32) -> Result<usize, NoopError> {
        let sh = self.shared.borrow();
        Ok(sh.qps[sh.slot(qp_num)?].recvs.len())
    }

    /// Completions dropped because the CQ (or a receive ring) was full.
    pub fn overflows(&self) -> u64 {
        self.shared.borrow().overflows
    }
}
