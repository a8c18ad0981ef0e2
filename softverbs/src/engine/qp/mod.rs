//! A queue pair as the engine runs it: its send and receive queues, its state and
//! attributes, its completion queues, its error and flush, and its timers. The QP
//! object (`crate::qp`: the state machine and posting, the verbs on a QP) contains
//! one and owns it; the engine's run queue and a peer's cache hold it too.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use vqp_sys::*;

use crate::cq::{event, CqCore, CtxCore};
use crate::os::lock;
use crate::shared::exports::QpView;
use crate::transport::Transport;

use crate::wqe::{RecvWqe, SendWqe};

pub(crate) mod remote_state;

use remote_state::RemoteState;

/// Mutable QP state, under the QP's lock.
pub(crate) struct QpInner {
    /// `IBV_QPS_*`.
    pub state: u32,
    /// Attributes as last set (fields outside the masks applied so far are zero).
    pub attr: ibv_qp_attr,
    pub sq: VecDeque<SendWqe>,
    pub rq: VecDeque<RecvWqe>,
    /// Executed unsignaled WQEs holding a slot until the next send completion.
    pub unsignaled: u32,
    /// RNR retries made for the WQE at the head of the send queue.
    pub rnr_tries: u8,
    /// Retransmissions made for the WQE at the head of the send queue after nobody
    /// answered it (counted against `retry_cnt`).
    pub retries: u8,
    /// The send queue is stalled (RNR back-off) until then.
    pub not_before: Option<Instant>,
    /// WQEs executed since creation (for "fail after n").
    pub executed: u64,
    /// The connected peer, cached after the first resolution.
    pub peer: Weak<QpCore>,
    /// Requests in flight to, and sequence state from, a QP of another process.
    pub remote: RemoteState,
    /// The send queue takes work requests: the QP reached RTS since it was last
    /// RESET (mlx5's `sq.qp_state_max_gs`, see `post`).
    pub sq_open: bool,
    /// The receive queue takes work requests: the QP reached INIT since it was last
    /// RESET (mlx5's `rq.qp_state_max_gs`).
    pub rq_open: bool,
}

/// The part of a QP the engine runs (see the module docs).
pub(crate) struct QpCore {
    pub qpn: u32,
    /// `IBV_QPT_RC`, `IBV_QPT_UC` or `IBV_QPT_UD`.
    pub qp_type: u32,
    /// Creation rank in the process, from 1.
    pub nth: u64,
    pub dev: usize,
    /// Protection domain id.
    pub pd: u32,
    pub ctx: Arc<CtxCore>,
    pub send_cq: Arc<CqCore>,
    pub recv_cq: Arc<CqCore>,
    /// The shared receive queue it takes its receives from, if any.
    pub srq: Option<Arc<crate::srq::SrqCore>>,
    /// The XRC domain of an XRC receive QP (whose requests take their receives from
    /// the SRQ of this domain they name).
    pub xrcd: Option<Arc<crate::xrc::XrcdCore>>,
    /// An XRC receive QP's handles (its events go to each; it lives while one does).
    pub tgt_handles: crate::xrc::TgtHandles,
    /// Address of the `ibv_qp` handed out (for asynchronous events).
    pub handle: AtomicUsize,
    /// `IBV_QPS_*`, readable without the lock.
    pub state: AtomicU32,
    /// Goes to error when it starts WQE number `fail_after` (counting from 0);
    /// `u64::MAX` for never.
    pub fail_after: AtomicU64,
    /// Minimum time from post to execution, in ns (0: none).
    pub delay_ns: AtomicU64,
    /// Send-queue slots in use: every posted WQE holds one until the completion that
    /// covers it (its own, or for an unsignaled WQE the next one of the QP) is polled.
    pub slots: Arc<AtomicU32>,
    /// Where the QP publishes to other processes whether it takes one-sided requests.
    transport: &'static Transport,
    inner: Mutex<QpInner>,
}

/// The transport timeout of a QP: `4.096 µs · 2^timeout · (retry_cnt + 1)` (0 means
/// "infinite" in the specification), clamped to 5 ms … 4 s: how long a requester waits
/// for an answer before it gives up.
pub(crate) fn transport_timeout(attr: &ibv_qp_attr) -> Duration {
    const MIN: Duration = Duration::from_millis(5);
    const MAX: Duration = Duration::from_secs(4);
    if attr.timeout == 0 {
        return MAX;
    }
    let ns = 4096u128 << attr.timeout.min(31);
    let total = ns * (u128::from(attr.retry_cnt.min(7)) + 1);
    Duration::from_nanos(total.min(u128::from(u64::MAX)) as u64).clamp(MIN, MAX)
}

/// The local ACK timeout of one attempt: the transport timeout shared among the first
/// transmission and the `retry_cnt` retransmissions (`4.096 µs · 2^timeout` within the
/// same bounds).
pub(crate) fn ack_timeout(attr: &ibv_qp_attr) -> Duration {
    transport_timeout(attr) / (u32::from(attr.retry_cnt.min(7)) + 1)
}

/// The RNR NAK timer of an encoded `min_rnr_timer` (IBA table 45).
pub(crate) fn rnr_delay(code: u8) -> Duration {
    const MICROS: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
        327_680, 491_520,
    ];
    Duration::from_micros(u64::from(MICROS[usize::from(code & 31)]))
}

/// The completion opcode of a send opcode.
pub(crate) fn wc_opcode(wr_opcode: u32) -> u32 {
    match wr_opcode {
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => IBV_WC_RDMA_WRITE,
        IBV_WR_RDMA_READ => IBV_WC_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP => IBV_WC_COMP_SWAP,
        IBV_WR_ATOMIC_FETCH_AND_ADD => IBV_WC_FETCH_ADD,
        IBV_WR_BIND_MW => IBV_WC_BIND_MW,
        IBV_WR_LOCAL_INV => IBV_WC_LOCAL_INV,
        _ => IBV_WC_SEND,
    }
}

impl QpCore {
    /// A QP in the RESET state, published to other processes through `transport`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        transport: &'static Transport,
        qpn: u32,
        qp_type: u32,
        nth: u64,
        dev: usize,
        pd: u32,
        ctx: Arc<CtxCore>,
        send_cq: Arc<CqCore>,
        recv_cq: Arc<CqCore>,
        srq: Option<Arc<crate::srq::SrqCore>>,
    ) -> QpCore {
        send_cq.users.fetch_add(1, Ordering::Relaxed);
        recv_cq.users.fetch_add(1, Ordering::Relaxed);
        if let Some(s) = &srq {
            s.users.fetch_add(1, Ordering::Relaxed);
        }
        QpCore {
            qpn,
            qp_type,
            nth,
            dev,
            pd,
            ctx,
            send_cq,
            recv_cq,
            srq,
            xrcd: None,
            tgt_handles: Default::default(),
            handle: AtomicUsize::new(0),
            state: AtomicU32::new(IBV_QPS_RESET),
            fail_after: AtomicU64::new(u64::MAX),
            delay_ns: AtomicU64::new(0),
            slots: Arc::new(AtomicU32::new(0)),
            transport,
            inner: Mutex::new(QpInner {
                state: IBV_QPS_RESET,
                attr: ibv_qp_attr::default(),
                sq: VecDeque::new(),
                rq: VecDeque::new(),
                unsignaled: 0,
                rnr_tries: 0,
                retries: 0,
                not_before: None,
                executed: 0,
                peer: Weak::new(),
                remote: Default::default(),
                sq_open: false,
                rq_open: false,
            }),
        }
    }

    /// Locks the QP's mutable state.
    pub fn lock(&self) -> MutexGuard<'_, QpInner> {
        lock(&self.inner)
    }

    /// Locks the QP's mutable state unless another thread holds it.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, QpInner>> {
        match self.inner.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Called when the QP is destroyed: drops its queues and its completions not yet
    /// polled (as `mlx5_destroy_qp` cleans its CQs, see [`QpCore::clean_cqs`]) and
    /// detaches it from its CQs.
    pub fn destroy(&self) {
        let mut g = self.lock();
        g.state = IBV_QPS_RESET;
        self.state.store(IBV_QPS_RESET, Ordering::Release);
        g.sq.clear();
        g.rq.clear();
        g.remote = Default::default();
        self.export(&g, None);
        drop(g);
        self.clean_cqs();
        self.send_cq.users.fetch_sub(1, Ordering::Relaxed);
        self.recv_cq.users.fetch_sub(1, Ordering::Relaxed);
        if let Some(s) = &self.srq {
            s.users.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(x) = &self.xrcd {
            x.users.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Makes it an XRC receive QP of domain `x` (counted as a user of it until
    /// [`QpCore::destroy`]).
    pub fn in_xrcd(mut self, x: Arc<crate::xrc::XrcdCore>) -> Self {
        x.users.fetch_add(1, Ordering::AcqRel);
        self.xrcd = Some(x);
        self
    }

    /// Moves the QP to the error state (from the engine), flushing everything
    /// outstanding, and raises `kind` on the context's asynchronous queue.
    pub fn to_error(&self, g: &mut QpInner, kind: Option<u32>) {
        if g.state == IBV_QPS_ERR {
            return;
        }
        g.state = IBV_QPS_ERR;
        self.state.store(IBV_QPS_ERR, Ordering::Release);
        self.export(g, None);
        self.flush(g);
        if let Some(kind) = kind {
            if !self.tgt_handles.raise(kind, self.transport.namespace()) {
                self.ctx.raise(kind, self.handle.load(Ordering::Relaxed));
            }
        }
        self.last_wqe_reached();
    }

    /// A QP of an SRQ that entered the error state consumes no more of its receives:
    /// `IBV_EVENT_QP_LAST_WQE_REACHED` (IBA Vol. 1 §11.6.3; mlx5 raises it for every
    /// such QP, `MLX5_EVENT_TYPE_WQ_LAST_WQE_REACHED`). Receives are taken only while
    /// the QP's lock is held, so none is consumed after this.
    pub fn last_wqe_reached(&self) {
        if self.srq.is_some() {
            self.ctx.raise(
                crate::cq::event::QP_LAST_WQE_REACHED,
                self.handle.load(Ordering::Relaxed),
            );
        }
    }

    /// Publishes to other processes whether this QP accepts one-sided requests now
    /// (RTR or RTS), from whom, and with which rights (`shared::exports`).
    /// `dest_dev`: the device the QP's address vector points at (`None` when the QP
    /// accepts no requests).
    pub fn export(&self, g: &QpInner, dest_dev: Option<usize>) {
        let view = dest_dev
            .filter(|_| matches!(g.state, IBV_QPS_RTR | IBV_QPS_RTS))
            .map(|dest_dev| QpView {
                access: g.attr.qp_access_flags,
                dest_dev,
                dest_qpn: g.attr.dest_qp_num,
                pd: self.pd,
                uc: self.unreliable(),
            });
        self.transport.export_qp(self.qpn, view);
    }

    /// Whether the QP is unreliable (UC or UD): nothing is acknowledged, so its
    /// requests complete successfully whatever becomes of them at the responder. (RC
    /// and the two halves of XRC are reliable.)
    #[inline]
    pub fn unreliable(&self) -> bool {
        matches!(self.qp_type, IBV_QPT_UC | IBV_QPT_UD)
    }

    /// Whether the QP is UD: each send names its destination through an address handle.
    #[inline]
    pub fn datagram(&self) -> bool {
        self.qp_type == IBV_QPT_UD
    }

    /// Removes this QP's completions not yet polled from its CQs, as rdma-core's mlx5
    /// provider does when a QP is modified to RESET or destroyed (`mlx5_modify_qp` →
    /// `mlx5_cq_clean`, `mlx5_destroy_qp` → `__mlx5_cq_clean`, providers/mlx5/cq.c):
    /// after ERR → RESET → … → RTS the next poll does not see the old flush.
    pub fn clean_cqs(&self) {
        self.recv_cq.clean(self.qpn);
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.send_cq.clean(self.qpn);
        }
    }

    /// Completions this QP's outstanding work will still put on `cq`: its signaled
    /// send WQEs queued or in flight (when `cq` is its send CQ) and its posted
    /// receives (when `cq` is its receive CQ and it has no SRQ). What `ibv_resize_cq`
    /// must leave room for (see `CqCore::resize`).
    pub fn owed_to(&self, cq: &Arc<CqCore>) -> usize {
        let g = self.lock();
        let mut n = 0;
        if Arc::ptr_eq(&self.send_cq, cq) {
            n += g.sq.iter().filter(|w| w.signaled).count() + g.remote.signaled_in_flight();
        }
        if Arc::ptr_eq(&self.recv_cq, cq) && self.srq.is_none() {
            n += g.rq.len();
        }
        n
    }

    /// Completes every queued WQE with `IBV_WC_WR_FLUSH_ERR`.
    pub fn flush(&self, g: &mut QpInner) {
        // Requests in flight to another process are older than anything queued.
        while let Some(w) = g.remote.take_in_flight() {
            let release = self.release(&mut g.unsignaled);
            self.send_cq.push(
                self.wc(w.wr_id, IBV_WC_WR_FLUSH_ERR, wc_opcode(w.opcode), 0),
                false,
                release,
            );
        }
        while let Some(w) = g.sq.pop_front() {
            let release = self.release(&mut g.unsignaled);
            self.send_cq.push(
                self.wc(w.wr_id, IBV_WC_WR_FLUSH_ERR, wc_opcode(w.opcode), 0),
                false,
                release,
            );
        }
        for r in g.rq.drain(..) {
            self.recv_cq.push(
                self.wc(r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0),
                false,
                None,
            );
        }
        g.not_before = None;
    }

    /// The slots a send completion releases: its own and those of the unsignaled WQEs
    /// before it.
    pub fn release(&self, unsignaled: &mut u32) -> crate::cq::Release {
        let k = 1 + core::mem::take(unsignaled);
        Some((Arc::clone(&self.slots), k))
    }

    /// A completion of this QP.
    pub fn wc(&self, wr_id: u64, status: u32, opcode: u32, byte_len: u32) -> ibv_wc {
        ibv_wc {
            wr_id,
            status,
            opcode,
            byte_len,
            qp_num: self.qpn,
            ..Default::default()
        }
    }
}

/// Event kinds re-exported for the engine.
pub(crate) use event::{QP_ACCESS_ERR, QP_FATAL, QP_REQ_ERR};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wqe::Sges;

    #[test]
    fn transport_timeout_follows_the_attributes_within_bounds() {
        let mut a = ibv_qp_attr::default();
        assert_eq!(transport_timeout(&a), Duration::from_secs(4));
        a.timeout = 14;
        a.retry_cnt = 7;
        // 4.096 µs · 2^14 · 8 ≈ 537 ms.
        let t = transport_timeout(&a);
        assert!(t > Duration::from_millis(530) && t < Duration::from_millis(540));
        a.timeout = 1;
        assert_eq!(transport_timeout(&a), Duration::from_millis(5));
        a.timeout = 31;
        assert_eq!(transport_timeout(&a), Duration::from_secs(4));
        // The local ACK timeout is one attempt's share: 4.096 µs · 2^14 ≈ 67 ms.
        a.timeout = 14;
        a.retry_cnt = 7;
        let t = ack_timeout(&a);
        assert!(t > Duration::from_millis(66) && t < Duration::from_millis(68));
    }

    #[test]
    fn rnr_timer_table() {
        assert_eq!(rnr_delay(12), Duration::from_micros(640));
        assert_eq!(
            rnr_delay(0),
            Duration::from_millis(655) + Duration::from_micros(360)
        );
        assert_eq!(rnr_delay(1), Duration::from_micros(10));
    }

    #[test]
    fn sges_spill_past_two() {
        let s = [ibv_sge {
            addr: 1,
            length: 2,
            lkey: 3,
        }; 3];
        assert_eq!(Sges::from_slice(&s[..2]).as_slice(), &s[..2]);
        assert_eq!(Sges::from_slice(&s).as_slice(), &s);
        assert_eq!(Sges::from_slice(&s).total(), 6);
        assert!(Sges::from_slice(&[]).as_slice().is_empty());
    }
}
