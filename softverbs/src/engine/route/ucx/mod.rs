//! The UCX route: a WQE of an RC or UC QP on a RoCE port (a device bound to a network
//! interface) whose destination GID names no device of this process nor of the shared
//! namespace — a QP on another machine, which `crate::ucx` is to reach (its design,
//! which this route follows, is in that module's docs).
//!
//! What this route does today is the requester's side of a request that nothing
//! carries yet: the discovery of the process serving (GID, QPN) on another machine and
//! the requests over UCP active messages are not wired in, so every request is lost,
//! as a packet to an address nobody answers is on the wire. It then ends as every
//! lost request does (`crate::transport`, "Routes"): an RC requester retransmits it
//! after the QP's local ACK timeout, `retry_cnt` times, and then completes it with
//! `IBV_WC_RETRY_EXC_ERR` (the QP goes to error and the rest flush); a UC requester,
//! which waits for no answer, completes it. This is what a lookup that finds nobody,
//! or an unreachable machine, will keep giving once discovery is in.
//!
//! IBA Vol. 1 §9.7.6.1.3 (and rdma-core's `ibv_modify_qp(3)`): the requester
//! retransmits when no acknowledgement comes within the local ACK timeout,
//! `4.096 µs · 2^timeout`, up to `retry_cnt` times, then reports the transport retry
//! counter exceeded (`IBV_WC_RETRY_EXC_ERR`, mlx5's syndrome
//! `MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR`).

use crate::engine::complete::unanswered;
use crate::engine::qp::{QpCore, QpInner};
use crate::engine::Step;
use crate::wqe::SendWqe;

/// Sends WQE `w` of `qp` (locked as `g`) to QP `qpn` at RoCE GID `gid` on another
/// machine. No process there is known (see the module's docs): the request is lost,
/// and retransmitted or failed by `complete::unanswered`.
pub(crate) fn send(qp: &QpCore, g: &mut QpInner, w: SendWqe, gid: [u8; 16], qpn: u32) -> Step {
    let _ = (gid, qpn);
    unanswered(qp, g, w)
}
