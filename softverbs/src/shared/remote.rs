//! The data path between processes: the requester's side (send a request, keep the WQE
//! in flight, complete it when the answer comes, give up when the owner died) and the
//! responder's (run a request through the engine's `respond` with a process-to-process
//! data mover, answer).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vqp_host::sys::*;

use super::inbox::{iov, Inbox, Kind, PushError, Record, F_INLINE, F_SOLICITED, PAYLOAD};
use super::sys::{process_copy, CopyError, Range};
use super::{Owner, Shared};
use crate::engine::{fail, resolve_av, respond, MoveError, Mover, Response, Step};
use crate::mem::{self, Span};
use crate::provider::{self, Provider};
use crate::qp::QP_REQ_ERR;
use crate::qp::{rnr_delay, wc_opcode, QpCore, QpInner, SendWqe, Sges};

/// Requests one QP keeps in flight at most; more wait in its send queue.
pub(crate) const MAX_IN_FLIGHT: usize = 64;
/// How long a QP waits before trying again when the peer's inbox is full or its
/// pipeline is.
const BACKOFF: Duration = Duration::from_micros(20);
/// Acknowledgements coalesced into one response carry at most this many bytes of
/// WRITE/SEND data (so a large transfer's completions are not held back).
const ACK_BYTES: u64 = 256 << 10;
/// Response codes.
const RESP_OK: u32 = 0;
const RESP_RNR: u32 = 1;
const RESP_ERR: u32 = 2;

/// Connection ids: a fresh one each time a QP starts sending to another process after
/// a reset or a reconnection, so the responder restarts its sequence.
static NEXT_CONN: AtomicU32 = AtomicU32::new(1);

/// A WQE sent to another process, waiting for its answer.
struct InFlight {
    w: SendWqe,
    psn: u32,
    sent: Instant,
}

/// The resolved peer of a requester QP.
struct Link {
    dev: usize,
    qpn: u32,
    owner: Owner,
    inbox: Arc<Inbox>,
    /// Where a request's payload is put together.
    scratch: Box<[u8; PAYLOAD]>,
}

/// A responder QP's view of the requester feeding it: who, and the next sequence
/// number it executes.
struct RespSeq {
    from: Owner,
    qpn: u32,
    conn: u32,
    expect: u32,
    inbox: Option<Arc<Inbox>>,
}

/// A QP's cross-process state, kept under the QP's lock. Empty (and allocation-free)
/// for a QP that only talks within its process.
#[derive(Default)]
pub(crate) struct RemoteState {
    in_flight: VecDeque<InFlight>,
    conn: u32,
    next_psn: u32,
    link: Option<Link>,
    resp: Option<RespSeq>,
    /// The QP is on the service thread's deadline list.
    watched: bool,
    /// The QP waits for room in its pipeline (an answer makes it runnable again).
    full: bool,
}

impl RemoteState {
    /// Takes the oldest WQE in flight (to flush it).
    pub(crate) fn take_in_flight(&mut self) -> Option<SendWqe> {
        self.in_flight.pop_front().map(|f| f.w)
    }
}

/// The transport timeout of a QP: `4.096 µs · 2^timeout · (retry_cnt + 1)` (0 means
/// "infinite" in the specification), clamped to 5 ms … 4 s.
fn transport_timeout(attr: &ibv_qp_attr) -> Duration {
    const MIN: Duration = Duration::from_millis(5);
    const MAX: Duration = Duration::from_secs(4);
    if attr.timeout == 0 {
        return MAX;
    }
    let ns = 4096u128 << attr.timeout.min(31);
    let total = ns * (u128::from(attr.retry_cnt.min(7)) + 1);
    Duration::from_nanos(total.min(u128::from(u64::MAX)) as u64).clamp(MIN, MAX)
}

/// Executes WQE `w` of `qp` whose peer is not in this process: sends it to the owning
/// process and leaves it in flight, or completes it with `IBV_WC_RETRY_EXC_ERR` when
/// nothing owns the peer QP (or a link is down).
pub(crate) fn send(
    p: &'static Provider,
    qp: &Arc<QpCore>,
    g: &mut QpInner,
    w: SendWqe,
    local: &[Span<'_>],
    len: u64,
) -> Step {
    let retry_exc = |g: &mut QpInner, w: &SendWqe| {
        fail(qp, g, w, IBV_WC_RETRY_EXC_ERR, None);
        Step::Failed
    };
    let dev = match resolve_av(p, &g.attr.ah_attr) {
        Some(d) if p.devices[qp.dev].is_up() && p.devices[d].is_up() => d,
        _ => return retry_exc(g, &w),
    };
    let Some(sh) = super::current() else {
        return retry_exc(g, &w);
    };
    let dest = g.attr.dest_qp_num;
    if !matches!(&g.remote.link, Some(l) if l.dev == dev && l.qpn == dest) {
        g.remote.link = None;
        let Some((owner, word)) = sh.registry.lookup(dest, dev) else {
            return retry_exc(g, &w);
        };
        if owner == sh.me {
            // Ours but not a live QP of ours: nothing answers.
            return retry_exc(g, &w);
        }
        if !sh.is_alive(owner) {
            sh.registry.reclaim(dest, word);
            sh.forget_peer(owner);
            return retry_exc(g, &w);
        }
        let Some(inbox) = sh.peer_inbox(owner) else {
            return retry_exc(g, &w);
        };
        g.remote.link = Some(Link {
            dev,
            qpn: dest,
            owner,
            inbox,
            scratch: Box::new([0; PAYLOAD]),
        });
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
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM
    ) && len <= PAYLOAD as u64;
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
                    mem::copy_to_bytes(&mut l.scratch[..n], local);
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
            l.inbox.push(&rec, payload)
        }
        None => Err(PushError::Full),
    };
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
    });
    if !g.remote.watched {
        g.remote.watched = true;
        lock(&sh.watch).push(Arc::downgrade(qp));
    }
    Step::Done
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fails the oldest request of every watched QP whose answer is later than its
/// transport timeout while the owner is dead. Returns whether any QP is still watched.
pub(crate) fn check_deadlines(sh: &Shared) -> bool {
    let mut watch = lock(&sh.watch);
    watch.retain(|weak| {
        let Some(qp) = weak.upgrade() else {
            return false;
        };
        // `try_lock`: senders hold the QP's lock while they add to this list.
        let Some(mut g) = qp.try_lock() else {
            return true;
        };
        if g.remote.in_flight.is_empty() {
            g.remote.watched = false;
            return false;
        }
        let limit = transport_timeout(&g.attr);
        if g.remote.in_flight[0].sent.elapsed() < limit {
            return true;
        }
        let owner = g.remote.link.as_ref().map(|l| l.owner);
        if let Some(o) = owner {
            if sh.is_alive(o) {
                // Late but alive (slow, or stopped): wait another round.
                g.remote.in_flight[0].sent = Instant::now();
                return true;
            }
            sh.forget_peer(o);
        }
        g.remote.link = None;
        if let Some(f) = g.remote.in_flight.pop_front() {
            fail(&qp, &mut g, &f.w, IBV_WC_RETRY_EXC_ERR, None);
        }
        g.remote.watched = false;
        false
    });
    !watch.is_empty()
}

/// Successful answers not sent yet: consecutive sequence numbers of one requester QP
/// with the same byte count, acknowledged by one response (its `len` is the count), as
/// an RC responder coalesces its ACKs. Sent when a different answer comes, when
/// [`ACK_BYTES`] of data were acknowledged, and at the end of each pass over the inbox.
pub(crate) struct Ack {
    to: Owner,
    inbox: Arc<Inbox>,
    rec: Record,
    bytes: u64,
}

/// Handles one record of our inbox (`payload`: its payload bytes); an answer may be
/// left in `ack` (see [`Ack`]; [`flush_ack`] sends it).
pub(crate) fn handle(sh: &'static Shared, rec: Record, payload: &[u8], ack: &mut Option<Ack>) {
    match rec.kind {
        Kind::Request => on_request(sh, &rec, payload, ack),
        Kind::Response => on_response(&rec),
    }
}

/// Sends the pending acknowledgement, if any.
pub(crate) fn flush_ack(sh: &Shared, ack: &mut Option<Ack>) {
    if let Some(a) = ack.take() {
        sh.send_response(a.to, a.inbox, a.rec);
    }
}

/// Moves a request's payload between the requester process and our checked spans.
struct RemoteMover<'r> {
    pid: u32,
    rec: &'r Record,
    payload: &'r [u8],
}

/// `EPERM` from `process_vm_*` is reported once.
static DENIED_REPORTED: AtomicBool = AtomicBool::new(false);

fn copy_status(e: CopyError) -> MoveError {
    match e {
        CopyError::Gone => MoveError::Gone,
        CopyError::Denied => {
            if !DENIED_REPORTED.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "vqp-softverbs: process_vm_readv/writev to another process was refused \
                     (EPERM): Yama's kernel.yama.ptrace_scope or a seccomp filter forbids it; \
                     cross-process WQEs complete with IBV_WC_REM_OP_ERR"
                );
            }
            MoveError::Status(IBV_WC_REM_OP_ERR)
        }
        CopyError::Fault => MoveError::Status(IBV_WC_LOC_PROT_ERR),
    }
}

impl RemoteMover<'_> {
    fn remote_ranges(&self, out: &mut [Range; 64]) -> usize {
        let n = (self.rec.n_iov as usize).min(out.len());
        for (i, r) in out.iter_mut().enumerate().take(n) {
            *r = iov(self.payload, i);
        }
        n
    }

    fn copy(&self, local: &[Span<'_>], pull: bool) -> Result<(), MoveError> {
        let mut l = [(0u64, 0u64); 64];
        let mut nl = 0;
        for s in local {
            if nl == l.len() {
                return Err(MoveError::Status(IBV_WC_LOC_PROT_ERR));
            }
            l[nl] = s.range();
            nl += 1;
        }
        let mut r = [(0u64, 0u64); 64];
        let nr = self.remote_ranges(&mut r);
        process_copy(self.pid, &l[..nl], &r[..nr], pull).map_err(copy_status)
    }
}

impl Mover for RemoteMover<'_> {
    fn pull(&mut self, dst: &[Span<'_>]) -> Result<(), MoveError> {
        if self.rec.flags & F_INLINE != 0 {
            mem::copy_from_bytes(dst, self.payload);
            return Ok(());
        }
        self.copy(dst, true)
    }

    fn push(&mut self, src: &[Span<'_>]) -> Result<(), MoveError> {
        self.copy(src, false)
    }

    fn push_bytes(&mut self, bytes: &[u8]) -> Result<(), MoveError> {
        let local = [(bytes.as_ptr() as u64, bytes.len() as u64)];
        let mut r = [(0u64, 0u64); 64];
        let nr = self.remote_ranges(&mut r);
        process_copy(self.pid, &local, &r[..nr], false).map_err(copy_status)
    }
}

/// Whether a request's sizes agree with themselves (a peer's record is not trusted).
fn well_formed(rec: &Record, payload: &[u8]) -> bool {
    if payload.len() != rec.payload_len {
        return false;
    }
    if rec.flags & F_INLINE != 0 {
        return rec.payload_len as u64 == rec.len;
    }
    let total: Option<u64> =
        (0..rec.n_iov as usize).try_fold(0u64, |t, i| t.checked_add(iov(payload, i).1));
    total == Some(rec.len)
}

fn on_request(sh: &'static Shared, rec: &Record, payload: &[u8], ack: &mut Option<Ack>) {
    let p = provider::get();
    let from = Owner {
        pid: rec.from_pid,
        token: rec.from_token,
    };
    let (dst_dev, src_dev) = (rec.dst_dev as usize, rec.src_dev as usize);
    let mut answer = |inbox: Option<Arc<Inbox>>, code: u32, value: u32| {
        if code == RESP_OK {
            if let Some(a) = ack.as_mut() {
                let r = &mut a.rec;
                if a.to == from
                    && r.src_qpn == rec.src_qpn
                    && r.src_dev == rec.src_dev
                    && r.dst_qpn == rec.dst_qpn
                    && r.dst_dev == rec.dst_dev
                    && r.conn == rec.conn
                    && r.value == value
                    && r.psn.wrapping_add(r.len as u32) == rec.psn
                    && a.bytes < ACK_BYTES
                {
                    r.len += 1;
                    a.bytes += rec.len;
                    return;
                }
            }
        }
        flush_ack(sh, ack);
        let mut r = Record::new(Kind::Response);
        r.code = code;
        r.value = value;
        r.from_pid = sh.me.pid;
        r.from_token = sh.me.token;
        r.src_qpn = rec.src_qpn;
        r.src_dev = rec.src_dev;
        r.dst_qpn = rec.dst_qpn;
        r.dst_dev = rec.dst_dev;
        r.conn = rec.conn;
        r.psn = rec.psn;
        r.len = 1;
        if let Some(ib) = inbox.or_else(|| sh.peer_inbox(from)) {
            if code == RESP_OK {
                *ack = Some(Ack {
                    to: from,
                    inbox: ib,
                    rec: r,
                    bytes: rec.len,
                });
            } else {
                sh.send_response(from, ib, r);
            }
        }
    };
    if dst_dev >= p.devices.len() || src_dev >= p.devices.len() {
        return answer(None, RESP_ERR, IBV_WC_RETRY_EXC_ERR);
    }
    let Some(b) = p
        .find_qp(dst_dev, rec.dst_qpn)
        .filter(|_| p.devices[dst_dev].is_up())
    else {
        return answer(None, RESP_ERR, IBV_WC_RETRY_EXC_ERR);
    };
    // The key table before the QP: the engine takes them in that order too (its
    // requester lock aside), so a waiting deregistration cannot wedge us.
    let mrs = p.mrs.read().unwrap_or_else(|e| e.into_inner());
    let mut gb = b.lock();
    let same = matches!(&gb.remote.resp,
        Some(s) if s.from == from && s.qpn == rec.src_qpn && s.conn == rec.conn);
    if !same {
        gb.remote.resp = Some(RespSeq {
            from,
            qpn: rec.src_qpn,
            conn: rec.conn,
            expect: rec.psn,
            inbox: sh.peer_inbox(from),
        });
    }
    let (expect, inbox) = match &gb.remote.resp {
        Some(s) => (s.expect, s.inbox.clone()),
        None => return,
    };
    if rec.psn != expect {
        // Out of sequence (after an RNR NAK or an error): the requester re-sends.
        return;
    }
    let response = if well_formed(rec, payload) {
        let w = SendWqe {
            wr_id: 0,
            opcode: rec.code,
            signaled: false,
            solicited: rec.flags & F_SOLICITED != 0,
            imm: rec.imm,
            sges: Sges::default(),
            inline: None,
            remote_addr: rec.remote_addr,
            rkey: rec.rkey,
            compare_add: rec.compare_add,
            swap: rec.swap,
            ready_at: None,
        };
        let mut mv = RemoteMover {
            pid: rec.from_pid,
            rec,
            payload,
        };
        respond(
            p,
            rec.src_qpn,
            src_dev,
            &b,
            &mut gb,
            &mrs,
            &w,
            rec.len,
            &mut mv,
        )
    } else {
        Response::responder(IBV_WC_REM_INV_REQ_ERR, QP_REQ_ERR)
    };
    let (code, value) = match response {
        Response::Ok(n) => {
            if let Some(s) = gb.remote.resp.as_mut() {
                s.expect = s.expect.wrapping_add(1);
            }
            (RESP_OK, n)
        }
        Response::Rnr(t) => (RESP_RNR, u32::from(t)),
        Response::Error { status, responder } => {
            // A responder-class error moves this process's QP to error and raises the
            // event here, where its owner polls for it (as in one process: `execute`).
            if let Some(event) = responder {
                b.to_error(&mut gb, Some(event));
            }
            (RESP_ERR, status)
        }
        Response::Dropped => return,
    };
    drop(gb);
    drop(mrs);
    answer(inbox, code, value);
}

fn on_response(rec: &Record) {
    let p = provider::get();
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
    if rec.code == RESP_OK {
        // `len` requests from `psn` on, all successful.
        g.rnr_tries = 0;
        for k in 0..rec.len.max(1) {
            match g.remote.in_flight.front() {
                Some(f) if f.psn == rec.psn.wrapping_add(k as u32) => {}
                _ => break,
            }
            let Some(f) = g.remote.in_flight.pop_front() else {
                break;
            };
            if f.w.signaled {
                let wc = qp.wc(f.w.wr_id, IBV_WC_SUCCESS, wc_opcode(f.w.opcode), rec.value);
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
            p.engine.enqueue(&qp, n);
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
            g.remote.full = false;
            // Back into the send queue, in order, to be sent again from this one.
            let mut n = 1u32;
            while let Some(x) = g.remote.in_flight.pop_back() {
                g.sq.push_front(x.w);
                n += 1;
            }
            g.sq.push_front(f.w);
            g.remote.next_psn = f.psn;
            g.not_before = Some(Instant::now() + rnr_delay(rec.value as u8));
            drop(g);
            p.engine.enqueue(&qp, n);
        }
        _ => fail(&qp, &mut g, &f.w, rec.value, None),
    }
}

/// A response that could not be delivered yet (the requester's inbox was full).
pub(crate) struct Pending {
    to: Owner,
    inbox: Arc<Inbox>,
    rec: Record,
    since: Instant,
}

impl Shared {
    /// Sends a response, or queues it behind earlier undelivered ones (responses to
    /// one requester stay in order; the consumer never blocks on a full peer).
    fn send_response(&self, to: Owner, inbox: Arc<Inbox>, rec: Record) {
        let mut out = lock(&self.outbox);
        if out.is_empty() {
            loop {
                match inbox.push(&rec, &[]) {
                    Ok(()) => return,
                    Err(PushError::Lost) => continue,
                    Err(PushError::Full) => break,
                }
            }
        }
        out.push_back(Pending {
            to,
            inbox,
            rec,
            since: Instant::now(),
        });
    }

    /// Retries undelivered responses; drops those whose requester died. Returns
    /// whether some remain.
    pub(crate) fn flush_outbox(&self) -> bool {
        let mut out = lock(&self.outbox);
        while let Some(front) = out.front() {
            match front.inbox.push(&front.rec, &[]) {
                Ok(()) => {
                    out.pop_front();
                }
                Err(PushError::Lost) => {}
                Err(PushError::Full) => {
                    if front.since.elapsed() > Duration::from_millis(100)
                        && !self.is_alive(front.to)
                    {
                        let dead = front.to;
                        out.retain(|x| x.to != dead);
                        continue;
                    }
                    break;
                }
            }
        }
        !out.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
