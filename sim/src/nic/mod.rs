//! A single-threaded, deterministic simulated RDMA NIC.
//!
//! A [`Nic`] handle creates everything: memory regions, completion queues ([`SimCq`],
//! a [`PhysCq`](vqp_core::PhysCq)) and RC queue pairs ([`SimQp`], a
//! [`PhysQp`](vqp_core::PhysQp)) on devices `0..devices`. Posting only queues work; the
//! test drives execution with [`Nic::step`], [`Nic::run_for`] or [`Nic::run`]. Each step
//! executes (or flushes) one WQE of one QP, chosen by the [`ReorderPolicy`]: order
//! within a QP is always kept, order across QPs is the policy's choice. Everything is
//! deterministic for a given [`NicConfig::seed`] and sequence of calls.
//!
//! # Semantics
//! - **Operations**: RDMA_WRITE, RDMA_WRITE_WITH_IMM (consumes the responder's head
//!   receive: `RECV_RDMA_WITH_IMM`, `byte_len` = write length, receive buffer unused),
//!   RDMA_READ, SEND / SEND_WITH_IMM (consumes the head receive, copies into its buffer),
//!   ATOMIC_FETCH_AND_ADD / ATOMIC_CMP_AND_SWP on an 8-byte aligned native-endian `u64`
//!   (the old value lands in the 8-byte local buffer). Zero-length WQEs use no key;
//!   zero-length RDMA checks no rkey (as the IB spec says for a zero DMA length).
//! - **Completions**: a successful send WQE completes only when `SIGNALED`; an error
//!   always completes. Error completions carry `opcode` `SEND` (0) and `byte_len` 0,
//!   like a zeroed CQE: verbs leaves both undefined, so a consumer must route by
//!   `(qp_num, wr_id)`. `imm_data` is copied verbatim from the send WQE.
//! - **Queue slots**: a send or receive WQE holds its slot until a completion for it, or
//!   (sends) for a later WQE of the same QP, is *polled* — as mlx5 advances its queue
//!   tails in `poll_cq`. Unsignaled WQEs therefore hold slots until a later signaled one
//!   is polled. Posting beyond `max_send_wr` / `max_recv_wr` held slots fails with
//!   `ENOMEM` and the accepted prefix (verbs' `bad_wr`).
//! - **States**: a new QP is in `Init` (receives may be posted, sends fail with
//!   `EINVAL`); [`Nic::connect`] moves both ends to `Rts`. Any error moves a QP to
//!   `Error`.
//! - **Errors at the requester**: bad lkey / local bounds / missing local write (READ and
//!   atomic results) → `LOC_PROT_ERR`; atomic length ≠ 8 → `LOC_LEN_ERR`; bad rkey /
//!   remote bounds / missing remote right → `REM_ACCESS_ERR`; misaligned atomic →
//!   `REM_INV_REQ_ERR`; SEND longer than the receive → `REM_INV_REQ_ERR` here and
//!   `LOC_LEN_ERR` on the responder's receive; bad receive buffer → `REM_OP_ERR` here and
//!   `LOC_PROT_ERR` on the receive; peer in error (it drops packets) → `RETRY_EXC_ERR`.
//! - **Who goes to error**: local errors and `RETRY_EXC_ERR`/`RNR_RETRY_EXC_ERR` put
//!   only the requester in error (the peer saw nothing). Remote errors
//!   (`REM_ACCESS_ERR`, `REM_INV_REQ_ERR`, `REM_OP_ERR`) put **both** ends in error, as an
//!   RC responder does after a NAK of class B/C.
//! - **Flush**: a QP in error flushes every outstanding WQE, send and receive, with
//!   `WR_FLUSH_ERR`, one per step (oldest first), each exactly once. Posting to a QP in
//!   error succeeds, as on mlx5, and the new WQEs are flushed the same way. Unsignaled
//!   flushed sends complete when [`NicConfig::flush_unsignaled`] is true (mlx5's
//!   behaviour, the default) and silently otherwise. Flushed receives always complete.
//! - **RNR**: a WITH_IMM write or a SEND meeting an empty receive queue stays at the head
//!   of its QP. With [`NicConfig::rnr_retry`] ≥ 7 it waits forever and is not runnable
//!   until the responder posts a receive; with n < 7, each step that picks it is one
//!   failed attempt and attempt n + 1 completes with `RNR_RETRY_EXC_ERR`.
//! - **CQ overflow**: a completion that finds its CQ full is dropped, the CQ's overflow
//!   counter grows, and the QP that produced it goes to error. Nothing panics.
//! - **Faults**: [`Nic::fail_qp_after`], [`Nic::fail_qp`], [`Nic::set_link_down`].
//! - **Rates**: [`Nic::set_send_rate`] limits a QP to some steps of its send queue per
//!   *tick*; [`Nic::tick`] starts a tick and runs until nothing is runnable. A QP whose
//!   steps for this tick are spent is not runnable until the next.
//!
//! # Example
//! Two QPs on two devices, connected; an RDMA_WRITE_WITH_IMM from one to the other.
//!
//! ```
//! use vqp_core::{Opcode, PhysQp, RecvWqe, SendFlags, SendWqe, WcOpcode};
//! use vqp_sim::{Access, Nic, NicConfig, QpCaps, ReorderPolicy};
//!
//! let nic = Nic::new(NicConfig { devices: 2, seed: 1, policy: ReorderPolicy::Random, ..NicConfig::default() });
//! let caps = QpCaps { max_send_wr: 64, max_recv_wr: 64 };
//! let (mut cq0, mut cq1) = (nic.create_cq(0, 128)?, nic.create_cq(1, 128)?);
//! let mut a = nic.create_qp(0, &cq0, &cq0, caps)?;
//! let mut b = nic.create_qp(1, &cq1, &cq1, caps)?;
//! nic.connect(&a, &b)?;
//! let (src, dst) = (nic.alloc_mr(0, 4096, Access::ALL)?, nic.alloc_mr(1, 4096, Access::ALL)?);
//! nic.write(src.addr, b"hello")?;
//!
//! b.post_recv(&[RecvWqe { wr_id: 7, ..RecvWqe::default() }]).unwrap();
//! a.post_send(&[SendWqe {
//!     wr_id: 1, opcode: Opcode::RDMA_WRITE_WITH_IMM, flags: SendFlags::SIGNALED,
//!     addr: src.addr, len: 5, lkey: src.lkey, remote_addr: dst.at(64), rkey: dst.rkey,
//!     imm_data: 0x0100_0000, ..SendWqe::default()
//! }]).unwrap();
//! nic.run();
//!
//! assert_eq!(nic.read_vec(dst.at(64), 5)?, b"hello");
//! assert!(cq0.drain()[0].status.is_ok());
//! let rx = cq1.drain();
//! assert_eq!((rx[0].wr_id, rx[0].opcode, rx[0].imm_data), (7, WcOpcode::RECV_RDMA_WITH_IMM, Some(0x0100_0000)));
//! # Ok::<(), vqp_sim::SimError>(())
//! ```

mod cq;
mod dma;
mod engine;
mod faults;
mod mem;
mod pace;
mod qp;
pub(crate) mod rng;

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

pub use cq::SimCq;
pub use mem::{Access, Mr};
pub use qp::{QpCaps, QpState, QpStats, SimQp};

use cq::Cq;
use dma::Dma;
use mem::Registry;
use qp::Qp;
use rng::SplitMix64;

/// The first QP number; QP `i` of a NIC has number `QPN_BASE + i`.
const QPN_BASE: u32 = 0x100;

/// How the engine chooses, at each step, the QP whose head WQE runs next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReorderPolicy {
    /// The QP whose head WQE was posted first: global posting order.
    #[default]
    Fifo,
    /// A runnable QP chosen uniformly at random (seeded by [`NicConfig::seed`]).
    Random,
    /// The QP whose head WQE was posted *last*: across QPs, work runs in reverse posting
    /// order wherever per-QP order allows it, the most reordering a policy can cause.
    Adversarial,
}

/// Configuration of a simulated NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicConfig {
    /// Number of devices; devices are the indices `0..devices`.
    pub devices: usize,
    /// Seed of the random policy.
    pub seed: u64,
    /// Cross-QP execution order.
    pub policy: ReorderPolicy,
    /// RNR retry count, as `ibv_qp_attr.rnr_retry`: 7 or more waits forever.
    pub rnr_retry: u8,
    /// Whether flushed unsignaled send WQEs produce a completion (true on mlx5).
    pub flush_unsignaled: bool,
}

impl Default for NicConfig {
    /// One device, seed 0, [`ReorderPolicy::Fifo`], infinite RNR retry, unsignaled
    /// flushes reported.
    fn default() -> Self {
        Self {
            devices: 1,
            seed: 0,
            policy: ReorderPolicy::Fifo,
            rnr_retry: 7,
            flush_unsignaled: true,
        }
    }
}

/// Counters over the whole NIC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicStats {
    /// Steps that did something (executed, flushed, or counted an RNR attempt).
    pub steps: u64,
    /// Send WQEs executed, successfully or with an error (flushes excluded).
    pub executed: u64,
    /// WQEs completed by flush (with or without a completion).
    pub flushed: u64,
    /// Completions written into CQs.
    pub cqes: u64,
    /// Completions dropped because their CQ was full.
    pub overflows: u64,
    /// RNR NAKs (failed attempts to find a receive).
    pub rnr_naks: u64,
}

/// A misuse of the simulator's control API (never a data-path status: those are
/// completions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimError {
    /// The device index is not below [`NicConfig::devices`].
    NoSuchDevice(usize),
    /// No QP of this NIC has this number.
    NoSuchQp(u32),
    /// An access combination verbs refuses.
    InvalidAccess(Access),
    /// The region is not registered (or was deregistered).
    UnknownMr,
    /// The range is not inside memory the NIC knows.
    NotMapped {
        /// First address.
        addr: u64,
        /// Length.
        len: usize,
    },
    /// A QP and a CQ on different devices.
    DeviceMismatch,
    /// The QP is not in the state the call needs (e.g. connecting a connected QP).
    BadState(QpState),
    /// A queue or CQ of zero capacity.
    ZeroCapacity,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchDevice(d) => write!(f, "no simulated device {d}"),
            Self::NoSuchQp(n) => write!(f, "no simulated QP {n:#x}"),
            Self::InvalidAccess(a) => write!(f, "invalid access flags {:#x}", a.0),
            Self::UnknownMr => f.write_str("memory region not registered"),
            Self::NotMapped { addr, len } => {
                write!(f, "range {addr:#x}+{len} is not simulated memory")
            }
            Self::DeviceMismatch => f.write_str("QP and CQ belong to different devices"),
            Self::BadState(s) => write!(f, "QP in state {s:?}"),
            Self::ZeroCapacity => f.write_str("zero capacity"),
        }
    }
}

impl std::error::Error for SimError {}

/// The NIC's whole state, shared by every handle.
#[derive(Debug)]
pub(crate) struct State {
    config: NicConfig,
    rng: SplitMix64,
    link_up: Vec<bool>,
    mem: Registry,
    dma: Dma,
    qps: Vec<Qp>,
    cqs: Vec<Cq>,
    /// Posting sequence number, across all queues of the NIC.
    seq: u64,
    stats: NicStats,
    /// Reused buffer of runnable QPs (no allocation per step once warm).
    scratch: Vec<(usize, u64)>,
}

impl State {
    fn check_device(&self, device: usize) -> Result<(), SimError> {
        if device < self.config.devices {
            Ok(())
        } else {
            Err(SimError::NoSuchDevice(device))
        }
    }

    fn qp_index(&self, qp_num: u32) -> Result<usize, SimError> {
        let i = qp_num.wrapping_sub(QPN_BASE) as usize;
        if qp_num >= QPN_BASE && i < self.qps.len() {
            Ok(i)
        } else {
            Err(SimError::NoSuchQp(qp_num))
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

/// A handle on one simulated NIC; clones share it.
#[derive(Clone, Debug)]
pub struct Nic {
    state: Rc<RefCell<State>>,
}

impl Nic {
    /// A NIC with `config.devices` devices, no memory, no queues.
    pub fn new(config: NicConfig) -> Self {
        let state = State {
            config,
            rng: SplitMix64::new(config.seed),
            link_up: vec![true; config.devices],
            mem: Registry::default(),
            dma: Dma::default(),
            qps: Vec::new(),
            cqs: Vec::new(),
            seq: 0,
            stats: NicStats::default(),
            scratch: Vec::new(),
        };
        Self {
            state: Rc::new(RefCell::new(state)),
        }
    }

    /// The configuration the NIC was built with.
    pub fn config(&self) -> NicConfig {
        self.state.borrow().config
    }

    /// Allocates `len` zeroed bytes owned by the NIC (alive as long as any handle) and
    /// returns their address, for [`Nic::register_buffer`], [`Nic::read`], [`Nic::write`].
    pub fn alloc(&self, len: usize) -> u64 {
        self.state.borrow_mut().dma.alloc(len)
    }

    /// Registers `[addr, addr + len)` of NIC-owned memory (from [`Nic::alloc`]) on
    /// `device`. The same memory may be registered on several devices, each giving its
    /// own keys, as with one buffer registered in several protection domains.
    pub fn register_buffer(
        &self,
        device: usize,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<Mr, SimError> {
        let mut st = self.state.borrow_mut();
        st.check_device(device)?;
        access.validate()?;
        if !st.dma.is_owned(addr, len) {
            return Err(SimError::NotMapped { addr, len });
        }
        Ok(st.mem.insert(device, addr, len, access, None))
    }

    /// Allocates `len` zeroed bytes and registers them on `device`.
    pub fn alloc_mr(&self, device: usize, len: usize, access: Access) -> Result<Mr, SimError> {
        self.state.borrow().check_device(device)?;
        access.validate()?;
        let addr = self.alloc(len);
        self.register_buffer(device, addr, len, access)
    }

    /// Removes a registration: its keys fail from now on (also for WQEs already
    /// posted). Memory owned by the NIC stays readable through [`Nic::read`].
    pub fn deregister(&self, mr: &Mr) -> Result<(), SimError> {
        let mut st = self.state.borrow_mut();
        if let Some(span) = st.mem.remove(mr)? {
            st.dma.remove_raw(span);
        }
        Ok(())
    }

    /// Copies simulated memory at `addr` into `out`.
    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), SimError> {
        self.state.borrow().dma.read(addr, out)
    }

    /// The `len` bytes of simulated memory at `addr`.
    pub fn read_vec(&self, addr: u64, len: usize) -> Result<Vec<u8>, SimError> {
        let mut v = vec![0; len];
        self.read(addr, &mut v)?;
        Ok(v)
    }

    /// Copies `data` into simulated memory at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), SimError> {
        self.state.borrow_mut().dma.write(addr, data)
    }

    /// The native-endian `u64` at `addr`.
    pub fn read_u64(&self, addr: u64) -> Result<u64, SimError> {
        self.state.borrow().dma.read_u64(addr)
    }

    /// Writes a native-endian `u64` at `addr`.
    pub fn write_u64(&self, addr: u64, v: u64) -> Result<(), SimError> {
        self.state.borrow_mut().dma.write_u64(addr, v)
    }

    /// Creates a completion queue of `capacity` entries on `device`.
    pub fn create_cq(&self, device: usize, capacity: usize) -> Result<SimCq, SimError> {
        let mut st = self.state.borrow_mut();
        st.check_device(device)?;
        if capacity == 0 {
            return Err(SimError::ZeroCapacity);
        }
        let idx = st.cqs.len();
        st.cqs.push(Cq::new(device, capacity));
        Ok(SimCq::new(self.state.clone(), idx))
    }

    /// Creates an RC queue pair on `device` (in state `Init`, or `Error` if the
    /// device's link is down). Both CQs must be on `device`; they may be the same CQ.
    pub fn create_qp(
        &self,
        device: usize,
        send_cq: &SimCq,
        recv_cq: &SimCq,
        caps: QpCaps,
    ) -> Result<SimQp, SimError> {
        let mut st = self.state.borrow_mut();
        st.check_device(device)?;
        if caps.max_send_wr == 0 || caps.max_recv_wr == 0 {
            return Err(SimError::ZeroCapacity);
        }
        for cq in [send_cq, recv_cq] {
            if !Rc::ptr_eq(&cq.state, &self.state) || st.cqs[cq.idx].device != device {
                return Err(SimError::DeviceMismatch);
            }
        }
        let idx = st.qps.len();
        let qp_num = QPN_BASE + idx as u32;
        let mut qp = Qp::new(qp_num, device, send_cq.idx, recv_cq.idx, caps);
        if !st.link_up[device] {
            qp.state = QpState::Error;
        }
        st.qps.push(qp);
        Ok(SimQp::new(self.state.clone(), idx, qp_num))
    }

    /// Connects two QPs of this NIC as an RC pair (they may be on different devices,
    /// or be the same QP for loopback); both must be in `Init` and move to `Rts`.
    pub fn connect(&self, a: &SimQp, b: &SimQp) -> Result<(), SimError> {
        for qp in [a, b] {
            if !Rc::ptr_eq(&qp.state, &self.state) {
                return Err(SimError::NoSuchQp(qp.qp_num));
            }
        }
        let mut st = self.state.borrow_mut();
        let (ia, ib) = (st.qp_index(a.qp_num)?, st.qp_index(b.qp_num)?);
        for i in [ia, ib] {
            if st.qps[i].state != QpState::Init {
                return Err(SimError::BadState(st.qps[i].state));
            }
        }
        st.qps[ia].peer = Some(ib);
        st.qps[ib].peer = Some(ia);
        st.qps[ia].state = QpState::Rts;
        st.qps[ib].state = QpState::Rts;
        Ok(())
    }

    /// Executes one step: one WQE of one runnable QP is executed, flushed, or (RNR with
    /// finite retries) fails one attempt. Returns false when nothing was runnable.
    pub fn step(&self) -> bool {
        self.state.borrow_mut().step()
    }

    /// Steps until nothing is runnable; returns the number of steps. Terminates: every
    /// step consumes a WQE or one of its finitely many RNR attempts, and a WQE waiting
    /// forever on RNR is not runnable.
    pub fn run(&self) -> u64 {
        let mut n = 0;
        while self.step() {
            n += 1;
        }
        n
    }

    /// Steps at most `max` times; returns the number of steps taken.
    pub fn run_for(&self, max: u64) -> u64 {
        let mut n = 0;
        while n < max && self.step() {
            n += 1;
        }
        n
    }

    /// True when no step would do anything.
    pub fn is_idle(&self) -> bool {
        let st = self.state.borrow();
        (0..st.qps.len()).all(|i| st.runnable(i).is_none())
    }

    /// NIC-wide counters.
    pub fn stats(&self) -> NicStats {
        self.state.borrow().stats
    }

    /// Counters of one QP.
    pub fn qp_stats(&self, qp_num: u32) -> Result<QpStats, SimError> {
        let st = self.state.borrow();
        Ok(st.qps[st.qp_index(qp_num)?].stats)
    }

    /// The state of one QP.
    pub fn qp_state(&self, qp_num: u32) -> Result<QpState, SimError> {
        let st = self.state.borrow();
        Ok(st.qps[st.qp_index(qp_num)?].state)
    }
}
