//! Send completions: crediting each physical completion to its request, and
//! reporting finished requests in posting order.

use super::error::Stray;
use super::slots::{credit_data, credit_notify};
use super::VirtualQp;
use crate::phys::PhysQp;
use crate::wr::{SendFlags, Wc, WcOut, WcStatus};
use crate::wrid::NOTIFY_LANE;

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// A send completion on data QP `lane` for the request whose id is `short`
    /// (mod 2^45).
    #[inline]
    pub(super) fn data_completion(
        &mut self,
        lane: usize,
        short: u64,
        status: WcStatus,
    ) -> Result<(), Stray> {
        let l = &mut self.lanes.data[lane];
        if let Some((id, count)) = l.complete_oldest(short, status) {
            credit_data(&mut self.tx.slots, id, count, WcStatus::SUCCESS);
            // The QP is healthy, or the completion would not have been the usual one.
            if l.outstanding < l.limit {
                self.lanes.room |= 1 << lane;
            }
            return Ok(());
        }
        self.data_completion_rest(lane, short, status)
    }

    /// [`Self::data_completion`] for anything but a success naming the oldest run
    /// on a healthy QP. Out of line, like
    /// [`Lane::complete`](super::lane::Lane::complete)'s own rest.
    #[cold]
    #[inline(never)]
    fn data_completion_rest(
        &mut self,
        lane: usize,
        short: u64,
        status: WcStatus,
    ) -> Result<(), Stray> {
        if self.lanes.data[lane].survived {
            // A QP the virtual QP went on without: its runs are posted again.
            return Ok(());
        }
        if !status.is_ok() && self.can_survive(lane) {
            // The runs before the one that failed completed; the rest go again.
            let send = &mut self.tx.slots;
            self.lanes.data[lane].fail_at(short, &mut |id, n, st| credit_data(send, id, n, st));
            self.survive(lane, status);
            return Ok(());
        }
        let send = &mut self.tx.slots;
        let l = &mut self.lanes.data[lane];
        let matched = l.complete_rest(short, status, &mut |id, n, st| credit_data(send, id, n, st));
        if l.has_room() {
            self.lanes.room |= 1 << lane;
        }
        if status.is_ok() {
            return if matched { Ok(()) } else { Err(Stray) };
        }
        self.fail(status);
        // An error for a run already credited is a flush of an unsignaled WQE.
        Ok(())
    }

    /// A send completion on `lane` (a data QP or [`NOTIFY_LANE`]) for the request
    /// whose id is `short` (mod 2^45).
    pub(super) fn send_completion(
        &mut self,
        lane: u8,
        short: u64,
        status: WcStatus,
    ) -> Result<(), Stray> {
        if lane != NOTIFY_LANE {
            return self.data_completion(lane as usize, short, status);
        }
        let Some(l) = self.lanes.notify.as_ref() else {
            return Err(Stray);
        };
        if l.survived {
            // A notify QP the virtual QP went on without: the peer's count says which
            // of its notifies landed.
            return Ok(());
        }
        if !status.is_ok() && self.try_survive_notify(status) {
            return Ok(());
        }
        let send = &mut self.tx.slots;
        let Some(l) = self.lanes.notify.as_mut() else {
            return Err(Stray);
        };
        let matched = l.complete(short, status, &mut |id, n, st| {
            credit_notify(send, id, n, st)
        });
        if !status.is_ok() {
            self.fail(status);
        }
        // An error for a run already credited is a flush of an unsignaled WQE.
        if matched || !status.is_ok() {
            Ok(())
        } else {
            Err(Stray)
        }
    }

    /// Report completed send requests in posting order into `out` from index `at`;
    /// returns how many.
    #[inline]
    pub(super) fn drain_sends<O: WcOut + ?Sized>(&mut self, out: &mut O, at: usize) -> usize {
        let mut n = at;
        while self.tx.slots.head != self.tx.slots.tail && n < out.capacity() {
            let slot = self.tx.slots.get(self.tx.slots.head);
            if !slot.complete() {
                break;
            }
            if slot.wr.flags.contains(SendFlags::SIGNALED) || !slot.status.is_ok() {
                out.put(
                    n,
                    Wc {
                        wr_id: slot.wr.wr_id,
                        status: slot.status,
                        opcode: slot.wr.opcode.completion(),
                        qp_num: self.cfg.qp_num,
                        imm_data: None,
                        byte_len: slot.wr.len,
                    },
                );
                n += 1;
            }
            self.tx.slots.head += 1;
        }
        n - at
    }
}
