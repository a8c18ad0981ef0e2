//! Queue pairs as objects: the verbs on a QP — the state machine with the
//! specification's attribute-mask rules, and posting — over the part of it the engine
//! runs ([`QpCore`]: queues, state, completions), which a [`Qp`] contains and owns.
//!
//! Files: this one holds the object and its creation; `state` the state machine
//! (`ibv_modify_qp`, `ibv_query_qp`); `post` the checks and queueing of
//! `ibv_post_send` / `ibv_post_recv`.

use std::ops::Deref;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use vqp_sys::*;

pub(crate) use crate::engine::QpCore;
pub(crate) use crate::wqe::{
    Datagram, RecvWqe, SendWqe, Sges, MAX_INLINE, MAX_MSG, MAX_QP_WR, MAX_RD_ATOMIC, MAX_SGE,
};

mod post;
mod state;

pub(crate) use post::sge_count;

/// A QP as the verbs see it: what the engine runs, and what only the verbs read (its
/// granted sizes, its signaling default, the `ibv_open_qp` handles on it).
pub(crate) struct Qp {
    /// The part the engine runs; the provider's table and the engine's run queue hold
    /// it too.
    core: Arc<QpCore>,
    /// Handles `ibv_open_qp` made on it that are still open.
    pub opens: AtomicU32,
    /// Every send WQE generates a completion (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// Granted sizes.
    pub cap: ibv_qp_cap,
}

impl Deref for Qp {
    type Target = QpCore;

    #[inline]
    fn deref(&self) -> &QpCore {
        &self.core
    }
}

impl Qp {
    /// The QP whose running part is `core` (made in the RESET state), with the sizes
    /// `cap` granted by [`Qp::grant`].
    pub fn new(core: QpCore, sq_sig_all: bool, cap: ibv_qp_cap) -> Qp {
        Qp {
            core: Arc::new(core),
            opens: AtomicU32::new(0),
            sq_sig_all,
            cap,
        }
    }

    /// The part the engine runs (for its run queue and the provider's table).
    #[inline]
    pub fn core(&self) -> &Arc<QpCore> {
        &self.core
    }

    /// Grants sizes for a request: zero is raised to one, anything above the device's
    /// limits is `EINVAL`.
    pub fn grant(req: &ibv_qp_cap) -> Result<ibv_qp_cap, i32> {
        if req.max_send_wr > MAX_QP_WR
            || req.max_recv_wr > MAX_QP_WR
            || req.max_send_sge > MAX_SGE
            || req.max_recv_sge > MAX_SGE
            || req.max_inline_data > MAX_INLINE
        {
            return Err(libc::EINVAL);
        }
        Ok(ibv_qp_cap {
            max_send_wr: req.max_send_wr.max(1),
            max_recv_wr: req.max_recv_wr.max(1),
            max_send_sge: req.max_send_sge.max(1),
            max_recv_sge: req.max_recv_sge.max(1),
            max_inline_data: req.max_inline_data.max(64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::state::transition;
    use super::*;

    #[test]
    fn transitions_follow_the_spec_table() {
        assert_eq!(
            transition(IBV_QPS_RESET, IBV_QPS_INIT),
            Some((IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0))
        );
        assert!(transition(IBV_QPS_RESET, IBV_QPS_RTR).is_none());
        assert!(transition(IBV_QPS_INIT, IBV_QPS_RTS).is_none());
        assert!(transition(IBV_QPS_RTR, IBV_QPS_RTR).is_none());
        assert!(transition(IBV_QPS_ERR, IBV_QPS_RTS).is_none());
        assert_eq!(transition(IBV_QPS_RTS, IBV_QPS_ERR), Some((0, 0)));
        assert_eq!(transition(IBV_QPS_ERR, IBV_QPS_RESET), Some((0, 0)));
    }

    #[test]
    fn xrc_transitions_are_the_kernels_xrc_ini_and_xrc_tgt() {
        use super::state::transition_of;
        let responder = IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        let (send_rtr, _) = transition_of(IBV_QPT_XRC_SEND, IBV_QPS_INIT, IBV_QPS_RTR).unwrap();
        let (recv_rtr, _) = transition_of(IBV_QPT_XRC_RECV, IBV_QPS_INIT, IBV_QPS_RTR).unwrap();
        assert_eq!(send_rtr & responder, 0);
        assert_eq!(recv_rtr, send_rtr | responder);
        let (send_rts, send_opt) =
            transition_of(IBV_QPT_XRC_SEND, IBV_QPS_RTR, IBV_QPS_RTS).unwrap();
        let (recv_rts, recv_opt) =
            transition_of(IBV_QPT_XRC_RECV, IBV_QPS_RTR, IBV_QPS_RTS).unwrap();
        assert_eq!(
            send_rts,
            transition_of(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS)
                .unwrap()
                .0
        );
        assert_eq!(recv_rts, IBV_QP_TIMEOUT | IBV_QP_SQ_PSN);
        assert_eq!(send_opt & IBV_QP_MIN_RNR_TIMER, 0);
        assert_ne!(recv_opt & IBV_QP_MIN_RNR_TIMER, 0);
        assert!(transition_of(IBV_QPT_XRC_RECV, IBV_QPS_RESET, IBV_QPS_RTR).is_none());
    }
}
