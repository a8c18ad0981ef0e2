//! The responder's side of a request from a QP on another machine.

use vqp_sys::*;

use crate::engine::qp::remote_state::MachineSeq;
use crate::engine::{respond, MoveError, Mover, QpCore, Requester, Response, Tables};
use crate::mem::{self, Span};
use crate::ucx::wire;
use crate::wqe::{Datagram, SendWqe, Sges};

/// The mover of a request from another machine: its payload came with it (the piece
/// of the message from byte `at`); a READ's data and an atomic's original value are
/// kept to travel back in the response.
struct BytesMover<'a> {
    payload: &'a [u8],
    at: u64,
    back: Vec<u8>,
    /// Where the buffer of a READ's data comes from.
    transport: &'a crate::transport::Transport,
}

impl Mover for BytesMover<'_> {
    fn pull(&mut self, dst: &[Span<'_>]) -> Result<(), MoveError> {
        // A fault can only be in our (on-demand) spans.
        mem::copy_from_bytes_at(dst, self.at, self.payload)
            .map(drop)
            .map_err(|_| MoveError::Target)
    }

    fn push(&mut self, src: &[Span<'_>]) -> Result<(), MoveError> {
        let mut b = self.transport.machine_buffer(mem::total(src) as usize);
        if mem::copy_to_bytes(&mut b, src).is_err() {
            self.transport.machine_recycle(b);
            return Err(MoveError::Target);
        }
        self.back = b;
        Ok(())
    }

    fn push_bytes(&mut self, bytes: &[u8]) -> Result<(), MoveError> {
        self.back = bytes.to_vec();
        Ok(())
    }
}

/// The provider's tables as the responder of a request from another machine sees them:
/// an address vector resolves to our device `dev` when it names the requester's GID
/// `sgid` (so `respond`'s connection check, that the QP's address is the requester's,
/// holds for the QP connected to it), and to nothing otherwise — a QP connected to a
/// QP of this machine is never taken for the requester's, whatever its number.
struct FromMachine<P: 'static> {
    p: &'static P,
    sgid: [u8; 16],
    dev: usize,
}

impl<P: Tables> Tables for FromMachine<P> {
    fn engine(&self) -> &crate::engine::Engine {
        self.p.engine()
    }
    fn devices(&self) -> &[crate::device::Device] {
        self.p.devices()
    }
    fn mrs(&self) -> &std::sync::RwLock<crate::mem::MrTable> {
        self.p.mrs()
    }
    fn find_qp(&self, dev: usize, qpn: u32) -> Option<std::sync::Arc<QpCore>> {
        self.p.find_qp(dev, qpn)
    }
    fn find_srq(&self, srqn: u32) -> Option<std::sync::Arc<crate::srq::SrqCore>> {
        self.p.find_srq(srqn)
    }
    fn resolve_av(&self, ah: &ibv_ah_attr) -> Option<usize> {
        (ah.is_global != 0 && *vqp_sys::Gid::from_sys(&ah.grh.dgid).as_bytes() == self.sgid)
            .then_some(self.dev)
    }
    fn on_object_record(
        &'static self,
        _: &'static crate::shared::Shared,
        _: &crate::shared::inbox::Record,
        _: &[u8],
    ) {
    }
}

/// Runs request `req` (decoded, with `payload`) from another machine at the QP it
/// names, and returns the answer to send back with its payload; `None` when none is
/// due (a request out of sequence). A UC requester gets an ACK whatever became of its
/// request.
pub(super) fn on_request<P: Tables>(
    p: &'static P,
    req: &wire::Request,
    payload: &[u8],
) -> Option<(wire::Response, Vec<u8>)> {
    let uc = req.flags & wire::F_UC != 0;
    let answer_in = |epoch: u32, code: u32, value: u32| wire::Response {
        code,
        src_qpn: req.src_qpn,
        dst_qpn: req.dst_qpn,
        conn: req.conn,
        psn: req.psn,
        value,
        value64: 0,
        len: 0,
        epoch,
    };
    let answer = |code: u32, value: u32| answer_in(0, code, value);
    let ud = req.flags & wire::F_UD != 0;
    // A WRITE that comes in pieces (`wire::FRAGMENT`) is answered once, at its last
    // piece, unless a piece fails.
    let last = req.is_last(payload.len() as u64);
    let drop_it = || {
        // A datagram is never answered.
        let code = if uc { wire::ACK } else { wire::DROP };
        (!ud && last).then(|| (answer(code, 0), Vec::new()))
    };
    let Some(dev) = p
        .devices()
        .iter()
        .position(|d| d.roce().is_some() && d.is_up() && d.gids().contains(&req.dgid))
    else {
        return drop_it();
    };
    // Our port's epoch, in every answer from here on.
    let epoch = p.devices()[dev].epoch();
    let answer = |code: u32, value: u32| answer_in(epoch, code, value);
    let Some(b) = p.find_qp(dev, req.dst_qpn) else {
        return drop_it();
    };
    if ud {
        datagram(p, req, dev, &b, payload);
        return None;
    }
    // The key table before the QP, as the namespace responder takes them.
    let mrs = p.mrs().read().unwrap_or_else(|e| e.into_inner());
    let mut gb = b.lock();
    // Only the requester the QP is connected to may set its sequence (`respond` checks
    // the connection again, with the QP's state and type).
    let connected = gb.attr.dest_qp_num == req.src_qpn
        && gb.attr.ah_attr.is_global != 0
        && *vqp_sys::Gid::from_sys(&gb.attr.ah_attr.grh.dgid).as_bytes() == req.sgid;
    if !connected {
        drop(gb);
        return drop_it();
    }
    if sent_before_a_flap(req.epoch, epoch) {
        drop(gb);
        if !last {
            return None;
        }
        // Not taken; a UC requester learns nothing (below), an RC one sends again.
        let code = if uc { wire::ACK } else { wire::STALE };
        return Some((answer(code, 0), Vec::new()));
    }
    let same = matches!(&gb.remote.machine_resp,
        Some(s) if s.sgid == req.sgid && s.qpn == req.src_qpn && s.conn == req.conn);
    if !same || uc {
        // A new connection's sequence starts at 0 (the requester's first request of a
        // connection has PSN 0): UCP may hand its second request over first, which
        // must then wait, not set the sequence. UC is never re-sent, so it follows
        // whatever comes.
        gb.remote.machine_resp = Some(MachineSeq {
            sgid: req.sgid,
            qpn: req.src_qpn,
            conn: req.conn,
            expect: if uc { req.psn } else { 0 },
            partial: 0,
            atomics: Default::default(),
        });
    }
    let (expect, partial) = gb
        .remote
        .machine_resp
        .as_ref()
        .map_or((req.psn, 0), |s| (s.expect, s.partial));
    if req.psn != expect {
        // Behind: a duplicate, re-sent after its answer was lost. A SEND or WRITE is
        // acknowledged again, a READ runs again, an atomic is answered with the
        // result kept (`AtomicResults`), or dropped when it is no longer kept. Ahead:
        // out of sequence, dropped; the requester re-sends.
        let behind = (expect.wrapping_sub(req.psn) as i32) > 0;
        if !behind || !last {
            return None;
        }
        match req.opcode {
            IBV_WR_RDMA_READ => {}
            IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                let kept = gb.remote.machine_resp.as_ref()?.atomics.find(req.psn)?;
                let mut r = answer(wire::ACK, 8);
                r.len = 8;
                return Some((r, kept.to_ne_bytes().to_vec()));
            }
            _ => return Some((answer(wire::ACK, 0), Vec::new())),
        }
    }
    // A piece of the message at `expect` follows the pieces run, or starts it again
    // (its requester sends the whole message again after losing a piece); else it is
    // dropped, as a NIC drops a packet out of sequence.
    if req.offset != 0 && u64::from(req.offset) != partial {
        return None;
    }
    let w = SendWqe {
        wr_id: 0,
        opcode: req.opcode,
        signaled: false,
        solicited: req.flags & wire::F_SOLICITED != 0,
        imm: req.imm,
        sges: Sges::default(),
        inline: None,
        remote_addr: req.remote_addr,
        rkey: req.rkey,
        compare_add: req.compare_add,
        swap: req.swap,
        ready_at: None,
        shaped: false,
        bind: None,
        xrc_srqn: 0,
        ud: None,
    };
    // The requester is "on" our device as far as `respond` asks: the view of the
    // tables it gets resolves the requester's GID, and only it, to our device.
    let a = Requester {
        qpn: req.src_qpn,
        dev,
        sgid: None,
        qp_type: if uc { IBV_QPT_UC } else { IBV_QPT_RC },
    };
    let mut mv = BytesMover {
        payload,
        at: u64::from(req.offset),
        back: Vec::new(),
        transport: p.engine().transport(),
    };
    let view = FromMachine {
        p,
        sgid: req.sgid,
        dev,
    };
    let response = respond(&view, a, &b, &mut gb, &mrs, &w, req.len, &mut mv);
    let out = match response {
        Response::Ok(_) if req.psn == expect && !last => {
            // A piece run: the message goes on with the next.
            if let Some(s) = gb.remote.machine_resp.as_mut() {
                s.partial = u64::from(req.offset) + payload.len() as u64;
            }
            None
        }
        Response::Ok(n) => {
            if req.psn == expect {
                let resources = gb.attr.max_dest_rd_atomic;
                if let Some(s) = gb.remote.machine_resp.as_mut() {
                    s.partial = 0;
                    s.expect = s.expect.wrapping_add(1);
                    let atomic = matches!(
                        req.opcode,
                        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
                    );
                    if let (true, Ok(orig)) = (atomic, <[u8; 8]>::try_from(mv.back.as_slice())) {
                        s.atomics.keep(req.psn, u64::from_ne_bytes(orig), resources);
                    }
                }
            }
            let mut r = answer(wire::ACK, n);
            r.len = mv.back.len() as u64;
            Some((r, std::mem::take(&mut mv.back)))
        }
        Response::Rnr(t) => Some((answer(wire::RNR, u32::from(t)), Vec::new())),
        Response::Error { status, responder } => {
            // A responder-class error moves our QP to error and raises the event here,
            // as between local processes.
            if let Some(event) = responder {
                b.to_error(&mut gb, Some(event));
            }
            Some((answer(wire::NAK, status), Vec::new()))
        }
        Response::Dropped => None,
        Response::Unanswered => last.then(|| (answer(wire::DROP, 0), Vec::new())),
    };
    drop(gb);
    drop(mrs);
    if uc {
        // A UC requester learns nothing of what became of its request: the answer
        // only says it was taken (it then completes).
        return last.then(|| (answer(wire::ACK, 0), Vec::new()));
    }
    out
}

/// Whether a request naming `epoch` (the epoch of our port its requester last heard,
/// plus one; 0 before any answer) left before our port last went down, our epoch
/// being `now`: it comes only now (nothing is taken while the port is down), held in
/// TCP's queues while the link was down, where a network would have lost it — as a
/// NIC's packets are lost with its link, and its requester gave up on them or sends
/// them again. Without this, a WRITE its requester gave up on could land once the
/// link came back, in a buffer used again since. A request sent after the port came
/// back, before its requester heard the new epoch, is taken for such a one too: the
/// answer ([`wire::STALE`]) tells the requester the epoch, and it sends it again at
/// once. A QP that never had an answer names no epoch and is not judged.
fn sent_before_a_flap(epoch: u32, now: u32) -> bool {
    epoch != 0 && epoch - 1 < now
}

/// Delivers datagram `req` (with `payload`) to UD QP `b` of device `dev`: the
/// responder's checks (the QP's type and state, the Q_Key, a receive and its length)
/// are the engine's; nothing is answered, whatever became of it.
fn datagram<P: Tables>(p: &'static P, req: &wire::Request, dev: usize, b: &QpCore, payload: &[u8]) {
    let global = req.flags & wire::F_GRH != 0;
    let w = SendWqe {
        wr_id: 0,
        opcode: req.opcode,
        signaled: false,
        solicited: req.flags & wire::F_SOLICITED != 0,
        imm: req.imm,
        sges: Sges::default(),
        inline: None,
        remote_addr: 0,
        rkey: req.rkey,
        compare_add: 0,
        swap: 0,
        ready_at: None,
        shaped: false,
        bind: None,
        xrc_srqn: 0,
        ud: Some(Datagram {
            dev: Some(dev),
            qpn: req.dst_qpn,
            qkey: req.rkey,
            global,
            sgid_index: 0,
        }),
    };
    // The GRH names the sender's GID as it sent it.
    let a = Requester {
        qpn: req.src_qpn,
        dev,
        sgid: global.then_some(req.sgid),
        qp_type: IBV_QPT_UD,
    };
    let mut mv = BytesMover {
        payload,
        at: u64::from(req.offset),
        back: Vec::new(),
        transport: p.engine().transport(),
    };
    let mrs = p.mrs().read().unwrap_or_else(|e| e.into_inner());
    let mut gb = b.lock();
    let _ = respond(p, a, b, &mut gb, &mrs, &w, req.len, &mut mv);
}

#[cfg(test)]
mod tests {
    use super::sent_before_a_flap;

    #[test]
    fn a_request_naming_an_epoch_before_the_ports_is_stale() {
        // No answer heard yet: not judged.
        assert!(!sent_before_a_flap(0, 0));
        assert!(!sent_before_a_flap(0, 3));
        // Heard epoch 0 (names 1): current while the port never went down.
        assert!(!sent_before_a_flap(1, 0));
        assert!(sent_before_a_flap(1, 1));
        // Heard epoch 2 (names 3): stale once the port went down a third time.
        assert!(!sent_before_a_flap(3, 2));
        assert!(sent_before_a_flap(3, 3));
        assert!(sent_before_a_flap(3, 7));
    }
}
