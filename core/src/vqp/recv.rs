//! The virtual QP's receive work: taking the application's receives, posting them on
//! the QPs (and DQPLB's kept-posted receives), and routing receive completions to
//! the receive side's state ([`Receiver`](super::receiver::Receiver)), which reports
//! them in posting order.
//!
//! Where a notification receive (length 0) goes depends on the set-up:
//! - one data QP: a zero-length receive on it, completed by the peer's
//!   pass-through WRITE_WITH_IMM;
//! - SPRAY: a zero-length receive on the notify QP, completed by the peer's notify;
//! - DQPLB: nothing is posted for it; it completes when the reorder window counts a
//!   notify bit. Messages that complete before any receive waits for them are kept
//!   (their lengths) and complete the next receives at once.

use super::config::Mode;
use super::error::{PostRecvError, Stray};
use super::fragment::app_recv_wqe;
use super::VirtualQp;
use crate::imm::Imm;
use crate::phys::{PhysQp, PhysWc, RecvWqe};
use crate::wr::{RecvWr, WcOut, WcStatus};
use crate::wrid::{Kind, WrId, NOTIFY_LANE};

/// Zero-length DQPLB receives are posted in chains of at most this many.
const RECV_CHAIN: usize = 32;

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// True when DQPLB's sequence-numbered fragments arrive here.
    fn dqplb_receiver(&self) -> bool {
        self.cfg.mode == Mode::Dqplb && self.lanes.data.len() > 1
    }

    /// Post the receives the peer's traffic needs before any arrives: in DQPLB with
    /// several data QPs, `recv_depth` zero-length receives on each (replenished one
    /// for one from then on). Call once the QPs can take receives (INIT or later)
    /// and before the peer sends; does nothing in other set-ups or when called again.
    pub fn arm_receiver(&mut self) {
        if !self.dqplb_receiver() || self.rx.armed() || self.failed.is_some() {
            return;
        }
        self.rx.arm();
        for lane in self.lanes.data.iter_mut() {
            lane.recv_owed = self.cfg.recv_depth;
        }
        self.replenish();
    }

    /// Take one receive request: length 0 for a notification receive, more for a
    /// data receive (passed through to data QP 0 for the peer's SEND).
    pub fn post_recv(&mut self, wr: &RecvWr) -> Result<(), PostRecvError> {
        if let Some(st) = self.failed {
            return Err(PostRecvError::Failed(st));
        }
        let dqplb = self.dqplb_receiver();
        if wr.len > 0 && dqplb {
            return Err(PostRecvError::DataNeedsSpray);
        }
        if self.rx.take(wr).is_none() {
            return Err(PostRecvError::Full);
        }
        if dqplb {
            if self.rx.match_held() {
                // Room in the store again: receives withheld may go now.
                self.replenish();
            }
        } else {
            self.post_recvs();
        }
        Ok(())
    }

    /// Post waiting receives while their QPs have room, and replenish DQPLB's.
    pub(super) fn post_recvs(&mut self) {
        self.replenish();
        if self.dqplb_receiver() || self.failed.is_some() {
            return;
        }
        let depth = self.cfg.recv_depth;
        while let Some((id, wr)) = self.rx.unposted() {
            let (lane, index) = match self.lanes.notify.as_mut() {
                Some(notify) if wr.len == 0 => (notify, NOTIFY_LANE),
                _ => (&mut self.lanes.data[0], 0),
            };
            // A replacement waiting for its peer takes receives (it must have them
            // before the peer sends), a failed QP does not.
            if (lane.failed && !lane.joining) || lane.recv_outstanding >= depth {
                return;
            }
            let wqe = app_recv_wqe(self.tag, index, id, &wr);
            // SAFETY: the post contract: the buffer comes with the key the application
            // gave (the device checks it), or the WQE has no scatter/gather element.
            if unsafe { lane.qp.post_recv(&[wqe]) }.is_err() {
                lane.failed = true;
                self.fail(WcStatus::POST_ERR);
                return;
            }
            lane.recv_outstanding += 1;
            lane.stats.recvs += 1;
            self.rx.posted_one();
        }
    }

    /// Post the zero-length receives DQPLB owes each data QP, as far as the store
    /// of held messages allows: every posted receive may bring one message that no
    /// receive waits for, so receives posted plus messages held stay within `S`.
    /// What is withheld makes the sender meet RNR and wait (backpressure) until the
    /// application posts receives again.
    fn replenish(&mut self) {
        if !self.rx.armed()
            || self.failed.is_some()
            || self.lanes.data.iter().all(|l| l.recv_owed == 0)
        {
            return;
        }
        let posted: u32 = self.lanes.data.iter().map(|l| l.recv_outstanding).sum();
        let mut budget = (S as u32).saturating_sub(posted + self.rx.held() as u32);
        let tag = self.tag;
        let n = self.lanes.data.len();
        // Start with the next QP next time, so that withheld receives are shared.
        let first = self.rx.replenish_from(n);
        let mut refused = false;
        for k in 0..n {
            let i = (first + k) % n;
            let lane = &mut self.lanes.data[i];
            while lane.recv_owed > 0 && budget > 0 && (!lane.failed || lane.joining) {
                let wqe = RecvWqe {
                    wr_id: WrId {
                        tag,
                        lane: i as u8,
                        kind: Kind::SeqRecv,
                        id: 0,
                    }
                    .encode(),
                    ..RecvWqe::default()
                };
                let count = (lane.recv_owed.min(budget) as usize).min(RECV_CHAIN);
                let chain = [wqe; RECV_CHAIN];
                // SAFETY: the post contract: zero-length receives name no memory.
                match unsafe { lane.qp.post_recv(&chain[..count]) } {
                    Ok(()) => {
                        lane.recv_owed -= count as u32;
                        lane.recv_outstanding += count as u32;
                        lane.stats.recvs += count as u64;
                        budget -= count as u32;
                    }
                    Err(f) => {
                        lane.recv_outstanding += f.posted as u32;
                        lane.failed = true;
                        refused = true;
                    }
                }
            }
        }
        if refused {
            self.fail(WcStatus::POST_ERR);
        }
    }

    /// A completion of a receive posted for request `short` (mod 2^45).
    pub(super) fn recv_completion(
        &mut self,
        lane: u8,
        short: u64,
        wc: &PhysWc,
    ) -> Result<(), Stray> {
        let l = if lane == NOTIFY_LANE {
            self.lanes.notify.as_mut().ok_or(Stray)?
        } else {
            &mut self.lanes.data[lane as usize]
        };
        let id = self.rx.find_posted(short).ok_or(Stray)?;
        if l.recv_outstanding == 0 {
            return Err(Stray);
        }
        l.recv_outstanding -= 1;
        if wc.status.is_ok() {
            self.rx.complete(
                id,
                wc.status,
                wc.opcode,
                u64::from(wc.byte_len),
                wc.imm_data,
            );
            l.seen = l.seen.wrapping_add(1);
            return Ok(());
        }
        if lane == NOTIFY_LANE {
            if self.try_survive_notify(wc.status) {
                // Posted again on the notify QP's replacement.
                return Ok(());
            }
            if let Some(l) = self.lanes.notify.as_mut() {
                l.failed = true;
            }
        } else {
            if self.try_survive(lane as usize, wc.status) {
                // Posted again on data QP 0's replacement.
                return Ok(());
            }
            self.lanes.data[lane as usize].failed = true;
        }
        self.rx.end(id, wc.status);
        self.fail(wc.status);
        Ok(())
    }

    /// A completion of one of DQPLB's kept-posted receives: a fragment arrived.
    pub(super) fn seq_completion(&mut self, lane: u8, wc: &PhysWc) -> Result<(), Stray> {
        let l = &mut self.lanes.data[lane as usize];
        if l.recv_outstanding == 0 {
            return Err(Stray);
        }
        l.recv_outstanding -= 1;
        if !wc.status.is_ok() {
            // With re-dispatch the virtual QP may go on without this QP: its
            // kept-posted receives are lost, the others carry on.
            if self.try_survive(lane as usize, wc.status) {
                return Ok(());
            }
            self.lanes.data[lane as usize].failed = true;
            self.fail(wc.status);
            return Ok(());
        }
        if self.failed.is_some() {
            return Ok(());
        }
        l.recv_owed += 1;
        self.arrival(wc);
        Ok(())
    }

    /// A completion of the QP data QP `lane` replaced (fail-back): a fragment that
    /// landed there before counts, anything else is over.
    pub(super) fn retired_completion(
        &mut self,
        lane: usize,
        kind: Kind,
        wc: &PhysWc,
    ) -> Result<(), Stray> {
        let l = &mut self.lanes.data[lane];
        match kind {
            Kind::SeqRecv if l.retired_recvs > 0 => {
                l.retired_recvs -= 1;
                if wc.status.is_ok() && self.failed.is_none() {
                    self.arrival(wc);
                }
                Ok(())
            }
            Kind::Send => Ok(()),
            // The application's receives it flushed were posted on the replacement.
            Kind::Recv if !wc.status.is_ok() => Ok(()),
            _ => Err(Stray),
        }
    }

    /// A DQPLB fragment `wc` arrived: count it in the window, completing the
    /// messages it ends.
    fn arrival(&mut self, wc: &PhysWc) {
        let Some(Ok(imm)) = wc.imm_data.map(Imm::from_wire) else {
            self.fail(WcStatus::PROTOCOL_ERR);
            return;
        };
        if !self.rx.arrive(imm, wc.byte_len) {
            self.fail(WcStatus::PROTOCOL_ERR);
        }
    }

    /// Receives that will never meet a physical completion end now: those not yet
    /// posted are flushed, DQPLB's waiting ones take the failure's status.
    pub(super) fn fail_recvs(&mut self, status: WcStatus) {
        let st = if self.dqplb_receiver() {
            status
        } else {
            WcStatus::WR_FLUSH_ERR
        };
        self.rx.end_unposted(st);
    }

    /// Report completed receive requests in posting order.
    #[inline]
    pub(super) fn drain_recvs<O: WcOut + ?Sized>(&mut self, out: &mut O, at: usize) -> usize {
        self.rx.drain(out, at, self.cfg.qp_num)
    }
}
