//! The requester's side of a WQE whose responder QP lives in another process.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vqp_sys::*;

use super::{direct, lock, InFlight, Link, MAX_IN_FLIGHT, RESP_DROP, RESP_OK, RESP_RNR};
use crate::engine::complete::{complete, fail, unanswered};
use crate::engine::qp::{ack_timeout, rnr_delay, transport_timeout, wc_opcode, QpCore, QpInner};
use crate::engine::{Step, Tables};
use crate::mem::{self, Span};
use crate::shared::inbox::{
    Kind, PushError, Record, F_GRH, F_INLINE, F_SOLICITED, F_UC, F_UD, F_XRC, GRH_SGID_SHIFT,
    PAYLOAD, XRC_SRQN_SHIFT,
};
use crate::shared::Shared;
use crate::wqe::SendWqe;

/// How long a QP waits before trying again when the peer's inbox is full or its
/// pipeline is.
const BACKOFF: Duration = Duration::from_micros(20);

/// Connection ids: a fresh one each time a QP starts sending to another process after
/// a reset or a reconnection, so the responder restarts its sequence.
static NEXT_CONN: AtomicU32 = AtomicU32::new(1);

/// Executes WQE `w` of `qp` whose peer, QP `dest` of device `dev` (resolved by the
/// route, both links up), is not in this process: sends it to the owning process and
/// leaves it in flight, or completes it with `IBV_WC_RETRY_EXC_ERR` when nothing owns
/// the peer QP.
#[allow(clippy::too_many_arguments)]
pub(crate) fn send<P: Tables>(
    p: &'static P,
    qp: &Arc<QpCore>,
    g: &mut QpInner,
    w: SendWqe,
    local: &[Span<'_>],
    len: u64,
    dev: usize,
    dest: u32,
) -> Step {
    // Nothing answers: an RC requester's retries run out; a UC requester, which waits
    // for no answer, has sent its message into the void and completes.
    let retry_exc = |g: &mut QpInner, w: &SendWqe| {
        if qp.unreliable() {
            return complete(qp, g, w, 0);
        }
        fail(qp, g, w, IBV_WC_RETRY_EXC_ERR, None);
        Step::Failed
    };
    let Some(sh) = p.engine().transport().namespace() else {
        return retry_exc(g, &w);
    };
    let same_link = matches!(&g.remote.link, Some(l) if l.dev == dev && l.qpn == dest);
    if !same_link && !g.remote.in_flight.is_empty() {
        // A UD QP changing destination: its requests in flight go to one process at a
        // time, so their answers come back in order.
        g.sq.push_front(w);
        g.remote.full = true;
        return Step::Rnr(BACKOFF);
    }
    if !same_link {
        g.remote.link = None;
        let Some((owner, word)) = sh.registry.lookup(dest, dev) else {
            return unanswered(qp, g, w);
        };
        if owner == sh.me {
            // Ours but not a live QP of ours: nothing answers.
            return unanswered(qp, g, w);
        }
        if !sh.is_alive(owner) {
            sh.registry.reclaim(dest, word);
            sh.forget_peer(owner);
            return unanswered(qp, g, w);
        }
        let Some(peer) = sh.peer(owner) else {
            return unanswered(qp, g, w);
        };
        g.remote.link = Some(Link {
            dev,
            qpn: dest,
            peer,
            scratch: Box::new([0; PAYLOAD]),
        });
    }
    if direct::eligible(g, &w, len) {
        let done = match &g.remote.link {
            Some(l) => direct::execute(sh, qp, l, &w, local, len),
            None => None,
        };
        if let Some(byte_len) = done {
            return complete(qp, g, &w, byte_len);
        }
    }
    // An XRC request for an SRQ of a process other than the receive QP's travels alone
    // (its responder forwards it; see `xrc`).
    let solo = qp.qp_type == IBV_QPT_XRC_SEND
        && g.remote
            .link
            .as_ref()
            .is_some_and(|l| super::xrc::forwarded(sh, l.peer.owner, l.dev, w.xrc_srqn));
    let behind_solo = g.remote.in_flight.back().is_some_and(|f| f.solo);
    if (solo && !g.remote.in_flight.is_empty()) || behind_solo {
        g.sq.push_front(w);
        g.remote.full = true;
        return Step::Rnr(BACKOFF);
    }
    if g.remote.in_flight.len() >= MAX_IN_FLIGHT {
        g.sq.push_front(w);
        g.remote.full = true;
        return Step::Rnr(BACKOFF);
    }
    if g.remote.conn == 0 {
        g.remote.conn = NEXT_CONN.fetch_add(1, Ordering::Relaxed).max(1);
        g.remote.next_psn = 0;
    }
    let mut rec = Record::new(Kind::Request);
    rec.code = w.opcode;
    rec.flags = if w.solicited { F_SOLICITED } else { 0 };
    if qp.datagram() {
        rec.flags |= F_UD;
        if let Some(d) = w.ud.filter(|d| d.global) {
            rec.flags |= F_GRH | u32::from(d.sgid_index) << GRH_SGID_SHIFT;
        }
    } else if qp.unreliable() {
        rec.flags |= F_UC;
    } else if qp.qp_type == IBV_QPT_XRC_SEND {
        rec.flags |= F_XRC | (w.xrc_srqn & 0x00ff_ffff) << XRC_SRQN_SHIFT;
    }
    rec.from_pid = sh.me.pid;
    rec.from_token = sh.me.token;
    rec.src_qpn = qp.qpn;
    rec.src_dev = qp.dev as u32;
    rec.dst_qpn = dest;
    rec.dst_dev = dev as u32;
    rec.conn = g.remote.conn;
    rec.psn = g.remote.next_psn;
    rec.rkey = w.rkey;
    rec.imm = w.imm;
    rec.len = len;
    rec.remote_addr = w.remote_addr;
    rec.compare_add = w.compare_add;
    rec.swap = w.swap;
    // Data that a WRITE or SEND carries and that fits a record travels in it: the
    // responder then copies it from the ring instead of calling `process_vm_readv`.
    let carried = matches!(
        w.opcode,
        IBV_WR_SEND
            | IBV_WR_SEND_WITH_IMM
            | IBV_WR_SEND_WITH_INV
            | IBV_WR_RDMA_WRITE
            | IBV_WR_RDMA_WRITE_WITH_IMM
    ) && len <= PAYLOAD as u64;
    // The local (on-demand) buffer of a carried payload could not be read.
    let mut unreadable = false;
    let pushed = match g.remote.link.as_mut() {
        Some(l) => {
            let payload: &[u8] = match &w.inline {
                Some(d) => {
                    rec.flags |= F_INLINE;
                    d
                }
                None if carried => {
                    rec.flags |= F_INLINE;
                    let n = len as usize;
                    unreadable = mem::copy_to_bytes(&mut l.scratch[..n], local).is_err();
                    &l.scratch[..n]
                }
                None => {
                    for s in local {
                        let (a, n) = s.range();
                        if n > 0 {
                            rec.push_iov(&mut l.scratch, a, n);
                        }
                    }
                    &l.scratch[..rec.payload_len]
                }
            };
            if unreadable {
                Ok(())
            } else {
                l.peer.inbox.push(&rec, payload)
            }
        }
        None => Err(PushError::Full),
    };
    if unreadable {
        fail(qp, g, &w, IBV_WC_LOC_PROT_ERR, None);
        return Step::Failed;
    }
    if pushed.is_err() {
        g.sq.push_front(w);
        return Step::Rnr(BACKOFF);
    }
    let psn = g.remote.next_psn;
    g.remote.next_psn = psn.wrapping_add(1);
    g.remote.in_flight.push_back(InFlight {
        w,
        psn,
        sent: Instant::now(),
        solo,
    });
    if !g.remote.watched {
        g.remote.watched = true;
        lock(&p.engine().watch).push(Arc::downgrade(qp));
    }
    Step::Done
}

/// Fails the oldest request of every watched QP whose answer is later than its
/// transport timeout while the owner is dead. Returns whether any QP is still watched.
pub(crate) fn check_deadlines<P: Tables>(p: &P, sh: &Shared) -> bool {
    let mut watch = lock(&p.engine().watch);
    watch.retain(|weak| {
        let Some(qp) = weak.upgrade() else {
            return false;
        };
        // `try_lock`: senders hold the QP's lock while they add to this list.
        let Some(mut g) = qp.try_lock() else {
            return true;
        };
        if super::xrc::watch(p, sh, &qp, &mut g) {
            return true;
        }
        if g.remote.in_flight.is_empty() {
            g.remote.watched = false;
            return false;
        }
        let limit = transport_timeout(&g.attr);
        if g.remote.in_flight[0].sent.elapsed() < limit {
            return true;
        }
        let owner = g.remote.link.as_ref().map(|l| l.peer.owner);
        if let Some(o) = owner {
            if sh.is_alive(o) {
                // Late but alive (slow, or stopped): wait another round.
                g.remote.in_flight[0].sent = Instant::now();
                return true;
            }
            sh.forget_peer(o);
        }
        g.remote.link = None;
        if qp.unreliable() {
            // Nothing was to be acknowledged: everything sent to the dead process
            // completes, as it would have on the wire.
            while let Some(f) = g.remote.in_flight.pop_front() {
                if matches!(complete(&qp, &mut g, &f.w, 0), Step::Failed) {
                    break;
                }
            }
        } else if let Some(f) = g.remote.in_flight.pop_front() {
            fail(&qp, &mut g, &f.w, IBV_WC_RETRY_EXC_ERR, None);
        }
        g.remote.watched = false;
        false
    });
    !watch.is_empty()
}

pub(super) fn on_response<P: Tables>(p: &'static P, rec: &Record) {
    let Some(qp) = p.find_qp(rec.src_dev as usize, rec.src_qpn) else {
        return;
    };
    let mut g = qp.lock();
    if g.remote.conn != rec.conn {
        return;
    }
    match g.remote.in_flight.front() {
        Some(f) if f.psn == rec.psn => {}
        _ => return,
    }
    // A UC requester completes whatever the answer (its responder answers only to let
    // it know the data was taken from its buffers).
    if rec.code == RESP_OK || qp.unreliable() {
        let byte_len = if rec.code == RESP_OK { rec.value } else { 0 };
        // `len` requests from `psn` on, all successful.
        g.rnr_tries = 0;
        g.retries = 0;
        for k in 0..rec.len.max(1) {
            match g.remote.in_flight.front() {
                Some(f) if f.psn == rec.psn.wrapping_add(k as u32) => {}
                _ => break,
            }
            let Some(f) = g.remote.in_flight.pop_front() else {
                break;
            };
            if f.w.signaled {
                let wc = qp.wc(f.w.wr_id, IBV_WC_SUCCESS, wc_opcode(f.w.opcode), byte_len);
                let release = qp.release(&mut g.unsignaled);
                if !qp.send_cq.push(wc, false, release) {
                    qp.to_error(&mut g, None);
                    return;
                }
            } else {
                g.unsignaled += 1;
            }
        }
        if g.remote.full && g.state == IBV_QPS_RTS {
            // Room in the pipeline again: run the waiting WQEs now rather than after
            // the back-off.
            g.remote.full = false;
            g.not_before = None;
            let n = g.sq.len() as u32;
            drop(g);
            p.engine().enqueue(p, &qp, n);
        }
        return;
    }
    let Some(f) = g.remote.in_flight.pop_front() else {
        return;
    };
    match rec.code {
        RESP_RNR => {
            let retry = g.attr.rnr_retry;
            if retry != 7 && g.rnr_tries >= retry {
                fail(&qp, &mut g, &f.w, IBV_WC_RNR_RETRY_EXC_ERR, None);
                return;
            }
            g.rnr_tries = g.rnr_tries.saturating_add(1);
            let delay = rnr_delay(rec.value as u8);
            resend_from(p, &qp, g, f, delay);
        }
        RESP_DROP => {
            // Nobody took it (see `unanswered`): retransmitted after the ACK timeout.
            if g.retries >= g.attr.retry_cnt.min(7) {
                fail(&qp, &mut g, &f.w, IBV_WC_RETRY_EXC_ERR, None);
                return;
            }
            g.retries += 1;
            let delay = ack_timeout(&g.attr);
            resend_from(p, &qp, g, f, delay);
        }
        _ => fail(&qp, &mut g, &f.w, rec.value, None),
    }
}

/// Puts `f` and every request sent after it back into the send queue, in order, to be
/// sent again from `f` after `delay` (the responder drops what follows a request it did
/// not execute, so order within the QP holds).
fn resend_from<P: Tables>(
    p: &'static P,
    qp: &Arc<QpCore>,
    mut g: std::sync::MutexGuard<'_, QpInner>,
    f: InFlight,
    delay: Duration,
) {
    g.remote.full = false;
    let mut n = 1u32;
    while let Some(x) = g.remote.in_flight.pop_back() {
        g.sq.push_front(x.w);
        n += 1;
    }
    g.sq.push_front(f.w);
    g.remote.next_psn = f.psn;
    g.not_before = Some(Instant::now() + delay);
    drop(g);
    p.engine().enqueue(p, qp, n);
}
