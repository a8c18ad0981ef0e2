//! Posting: the checks of a send or receive request (opcode, SGE count, inline size,
//! queue room) and its queueing, as `ibv_post_send` / `ibv_post_recv` do them.

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use vqp_sys::*;

use super::*;
use crate::engine::qp::wc_opcode;
use crate::engine::QpInner;

/// Whether the opcode is one this provider executes on a QP of type `qp_type`: RC has
/// them all; UC has SEND and RDMA WRITE (with immediate or not), no READ, no atomics
/// and no SEND with invalidate; UD has SEND only (IBA Vol. 1 §9.4 lists which
/// transports carry which operations). Binding a memory window and local
/// invalidation are local operations of the connected transports (§10.6.7.2: a
/// window is bound through an RC or UC QP).
fn supported(qp_type: u32, opcode: u32) -> bool {
    // An XRC send QP carries what RC carries (mlx5's `MLX5_SUPPORTED_SEND_OPS_FLAGS_XRC`
    // is RC's); an XRC receive QP has no send queue.
    let qp_type = match qp_type {
        IBV_QPT_XRC_SEND => IBV_QPT_RC,
        IBV_QPT_XRC_RECV => return false,
        t => t,
    };
    match opcode {
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM => true,
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => qp_type != IBV_QPT_UD,
        IBV_WR_BIND_MW | IBV_WR_LOCAL_INV => qp_type != IBV_QPT_UD,
        IBV_WR_RDMA_READ
        | IBV_WR_ATOMIC_CMP_AND_SWP
        | IBV_WR_ATOMIC_FETCH_AND_ADD
        | IBV_WR_SEND_WITH_INV => qp_type == IBV_QPT_RC,
        _ => false,
    }
}

impl Qp {
    /// Checks the shape of a send request before its SGEs are read: opcode, SGE count
    /// (`n`, see [`sge_count`]), inline opcode, atomic operand. An errno value on
    /// failure, as rdma-core's mlx5 provider (`providers/mlx5/qp.c`,
    /// `_mlx5_post_send`) answers where it checks the same thing:
    /// - an opcode this QP does not execute: `EINVAL` (mlx5: `EINVAL` for one outside
    ///   its opcode table; a READ or an atomic on UC, which its transport cannot carry,
    ///   is refused here rather than failed by the device);
    /// - more SGEs than the QP's `max_send_sge`, inline or not: `ENOMEM` (mlx5:
    ///   `num_sge > qp->sq.qp_state_max_gs` → `ENOMEM`);
    /// - `IBV_SEND_INLINE` on a READ, an atomic, a bind or a local invalidation, and an
    ///   atomic without exactly one
    ///   SGE: `EINVAL` (mlx5 does not check these and builds a WQE the device then
    ///   fails; the verbs' "invalid request" is the clearer answer).
    pub fn check_send(&self, opcode: u32, flags: u32, n: u32) -> Result<(), i32> {
        if !supported(self.qp_type, opcode) {
            return Err(libc::EINVAL);
        }
        if n > self.cap.max_send_sge {
            return Err(libc::ENOMEM);
        }
        if flags & IBV_SEND_INLINE != 0
            && !matches!(
                opcode,
                IBV_WR_SEND
                    | IBV_WR_SEND_WITH_IMM
                    | IBV_WR_SEND_WITH_INV
                    | IBV_WR_RDMA_WRITE
                    | IBV_WR_RDMA_WRITE_WITH_IMM
            )
        {
            return Err(libc::EINVAL);
        }
        if matches!(
            opcode,
            IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
        ) && n != 1
        {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    /// Checks the length of inline data: more than the QP's `max_inline_data` is
    /// `ENOMEM`, as in mlx5's `set_data_inl_seg` (`providers/mlx5/qp.c`).
    pub fn check_inline(&self, len: u64) -> Result<(), i32> {
        if len > u64::from(self.cap.max_inline_data) {
            return Err(libc::ENOMEM);
        }
        Ok(())
    }

    /// Posts send WQEs in order until one fails; returns how many were posted and the
    /// error of the first that was not.
    ///
    /// Which states take sends is mlx5's rule (`providers/mlx5/qp.c`,
    /// `_mlx5_post_send`: `num_sge > qp->sq.qp_state_max_gs` → `ENOMEM`; `verbs.c`,
    /// `set_qp_operational_state` sets that limit to -1 at creation and on RESET and to
    /// the queue's SGE count on reaching RTS, and no other transition touches it): a QP
    /// that has not reached RTS since it was created or last RESET (RESET, INIT, RTR,
    /// or ERR entered from those) refuses every send with `ENOMEM`; in RTS they queue;
    /// in ERR after RTS they are accepted and complete at once with
    /// `IBV_WC_WR_FLUSH_ERR`, as the device flushes them.
    pub fn post_send(
        &self,
        wqes: &mut dyn Iterator<Item = Result<SendWqe, i32>>,
    ) -> (u32, u32, Result<(), i32>) {
        let mut g = self.lock();
        self.push_sends(&mut g, wqes)
    }

    /// Posts a batch of send WQEs all or nothing (`ibv_wr_complete`): with the errors of
    /// [`Qp::post_send`] — `EINVAL` outside RTS (and ERR), `ENOMEM` when the send
    /// queue has no room for all of them — checked for the whole batch before any is
    /// posted. Returns how many were queued for execution.
    pub fn post_send_all(&self, wqes: Vec<SendWqe>) -> Result<u32, i32> {
        let mut g = self.lock();
        if !matches!(g.state, IBV_QPS_RTS | IBV_QPS_ERR) {
            return Err(libc::EINVAL);
        }
        let room = self
            .cap
            .max_send_wr
            .saturating_sub(self.slots.load(Ordering::Acquire));
        if wqes.len() > room as usize {
            return Err(libc::ENOMEM);
        }
        let (_, queued, result) = self.push_sends(&mut g, &mut wqes.into_iter().map(Ok));
        result.map(|()| queued)
    }

    /// The loop of [`Qp::post_send`], under the QP's lock.
    fn push_sends(
        &self,
        g: &mut MutexGuard<'_, QpInner>,
        wqes: &mut dyn Iterator<Item = Result<SendWqe, i32>>,
    ) -> (u32, u32, Result<(), i32>) {
        let (mut posted, mut queued) = (0u32, 0u32);
        let delay = self.delay_ns.load(Ordering::Relaxed);
        let ready_at = (delay != 0).then(|| Instant::now() + Duration::from_nanos(delay));
        for item in wqes {
            let mut w = match item {
                Ok(w) => w,
                Err(e) => return (posted, queued, Err(e)),
            };
            if !g.sq_open {
                return (posted, queued, Err(libc::ENOMEM));
            }
            if self.slots.load(Ordering::Acquire) >= self.cap.max_send_wr {
                return (posted, queued, Err(libc::ENOMEM));
            }
            self.slots.fetch_add(1, Ordering::AcqRel);
            if g.state == IBV_QPS_ERR {
                let release = self.release(&mut g.unsignaled);
                self.send_cq.push(
                    self.wc(w.wr_id, IBV_WC_WR_FLUSH_ERR, wc_opcode(w.opcode), 0),
                    false,
                    release,
                );
                posted += 1;
                continue;
            }
            w.signaled |= self.sq_sig_all;
            w.ready_at = ready_at;
            g.sq.push_back(w);
            posted += 1;
            queued += 1;
        }
        (posted, queued, Ok(()))
    }

    /// Posts receive WQEs in order until one fails (see [`Qp::post_send`]).
    /// Receives are taken once the QP reached INIT since it was created or last RESET
    /// (mlx5: `mlx5_post_recv` compares `num_sge` with `rq.qp_state_max_gs`, -1 until
    /// INIT, and answers `EINVAL`); before that — RESET, or ERR entered from RESET —
    /// they are refused with `EINVAL`. In ERR they complete at once with
    /// `IBV_WC_WR_FLUSH_ERR`.
    pub fn post_recv(
        &self,
        wqes: &mut dyn Iterator<Item = Result<RecvWqe, i32>>,
    ) -> (u32, Result<(), i32>) {
        if self.srq.is_some() || matches!(self.qp_type, IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV) {
            // Its receive queue has no room (mlx5 creates it empty: `ENOMEM`); XRC QPs
            // have none at all (their receives are the XRC SRQs').
            return (0, Err(libc::ENOMEM));
        }
        let mut g = self.lock();
        let mut posted = 0u32;
        for item in wqes {
            let r = match item {
                Ok(r) => r,
                Err(e) => return (posted, Err(e)),
            };
            if !g.rq_open {
                return (posted, Err(libc::EINVAL));
            }
            match g.state {
                IBV_QPS_ERR => {
                    self.recv_cq.push(
                        self.wc(r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0),
                        false,
                        None,
                    );
                }
                _ => {
                    if g.rq.len() >= self.cap.max_recv_wr as usize {
                        return (posted, Err(libc::ENOMEM));
                    }
                    g.rq.push_back(r);
                }
            }
            posted += 1;
        }
        (posted, Ok(()))
    }

    /// Checks the shape of a receive request: more SGEs (`n`, see [`sge_count`]) than
    /// the QP's `max_recv_sge` is `EINVAL`, as in mlx5's `mlx5_post_recv`
    /// (`providers/mlx5/qp.c`: `num_sge > qp->rq.qp_state_max_gs` → `EINVAL`).
    pub fn check_recv(&self, n: u32) -> Result<(), i32> {
        if n > self.cap.max_recv_sge {
            return Err(libc::EINVAL);
        }
        Ok(())
    }
}

/// The number of SGEs a work request's `num_sge` names. A negative count is taken as
/// none, as rdma-core's mlx5 provider does: `_mlx5_post_send` and `mlx5_post_recv`
/// (`providers/mlx5/qp.c`) compare the signed `num_sge` with a signed limit, which a
/// negative value passes, and their gather/scatter loops (`i < num_sge`) then copy no
/// entry, so the request is posted without data. (The specification has no negative
/// count; some providers refuse one with `EINVAL`, but this provider stands in for
/// ConnectX and answers as it does.)
pub(crate) fn sge_count(num_sge: i32) -> u32 {
    u32::try_from(num_sge).unwrap_or(0)
}
