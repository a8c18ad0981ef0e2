//! How a requester's WQE ends: completed successfully, completed in error (the QP
//! going to error), or left unanswered (retransmitted after the ACK timeout, then
//! failed). Shared by every route (`route`), beneath them.

use vqp_sys::*;

use super::qp::{ack_timeout, wc_opcode, QpCore, QpInner};
use super::Step;
use crate::wqe::SendWqe;

/// Completes `w` in error and moves the requester to the error state.
pub(crate) fn fail(qp: &QpCore, g: &mut QpInner, w: &SendWqe, status: u32, event: Option<u32>) {
    let release = qp.release(&mut g.unsignaled);
    qp.send_cq.push(
        qp.wc(w.wr_id, status, wc_opcode(w.opcode), 0),
        false,
        release,
    );
    qp.to_error(g, event);
}

/// A request nobody took (its responder QP does not exist or is not connected to
/// this one): the packet is lost, as on the wire, where an InfiniBand responder
/// silently drops a packet for a QP that cannot take it. The requester retransmits
/// after its local ACK timeout, `retry_cnt` times, and only then completes the WQE
/// with `IBV_WC_RETRY_EXC_ERR` (the QP's `timeout` and `retry_cnt` attributes, as
/// `ibv_modify_qp(3)` describes them). A responder that becomes ready within that
/// time takes the retransmission. Unreliable (UC) requests wait for no answer: sent
/// into the void, they complete.
pub(crate) fn unanswered(qp: &QpCore, g: &mut QpInner, w: SendWqe) -> Step {
    if qp.unreliable() {
        return complete(qp, g, &w, 0);
    }
    if g.retries >= g.attr.retry_cnt.min(7) {
        fail(qp, g, &w, IBV_WC_RETRY_EXC_ERR, None);
        return Step::Failed;
    }
    g.retries += 1;
    g.sq.push_front(w);
    Step::Rnr(ack_timeout(&g.attr))
}

/// Completes `w` successfully (a completion if it is signaled, else a slot held until
/// the next one); the QP fails when its CQ overflows. Every successful WQE ends here:
/// inlined into the execution loop, as when it lived beside it (callgrind: about 8
/// instructions a WQE more without).
#[inline]
pub(crate) fn complete(qp: &QpCore, g: &mut QpInner, w: &SendWqe, byte_len: u32) -> Step {
    g.rnr_tries = 0;
    g.retries = 0;
    if w.signaled {
        let wc = qp.wc(w.wr_id, IBV_WC_SUCCESS, wc_opcode(w.opcode), byte_len);
        let release = qp.release(&mut g.unsignaled);
        if !qp.send_cq.push(wc, false, release) {
            qp.to_error(g, None);
            return Step::Failed;
        }
    } else {
        g.unsignaled += 1;
    }
    Step::Done
}
