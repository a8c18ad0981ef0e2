//! Failing: a physical QP's error that re-dispatch does not survive fails the whole
//! virtual QP with its first error; asynchronous events and shutting down get there
//! too. Every request outstanding is then reported once, with an error.

use super::VirtualQp;
use crate::phys::PhysQp;
use crate::wr::WcStatus;

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// Stop on purpose: take no new request, and move every physical QP to the error
    /// state so that everything outstanding is flushed and reported (with
    /// `WR_FLUSH_ERR`) through the usual polling. For shutdown without waiting.
    pub fn shut_down(&mut self) {
        self.fail(WcStatus::WR_FLUSH_ERR);
    }

    /// Physical QP `qp_num` of `device` failed outside any completion (an asynchronous
    /// event reported it: QP fatal, a remote access or request error at this side as a
    /// responder): if it is one of this virtual QP's, the virtual QP fails with `status`
    /// as an error completion of it would fail it. Returns whether it was ours.
    pub fn fail_qp(&mut self, qp_num: u32, device: u8, status: WcStatus) -> bool {
        let ours = self
            .lanes
            .data
            .iter()
            .chain(self.lanes.notify.iter())
            .any(|l| l.qp_num == qp_num && l.device == device);
        if !ours {
            return false;
        }
        // With re-dispatch, a data QP fails alone while another is healthy.
        let data = self
            .lanes
            .data
            .iter()
            .position(|l| l.qp_num == qp_num && l.device == device);
        match data {
            Some(k) if self.try_survive(k, status) => {}
            // Not a data QP: the notify QP.
            None if self.try_survive_notify(status) => {}
            _ => self.fail(status),
        }
        true
    }

    /// Every physical QP on `device` failed (its port went down, the device failed):
    /// as [`Self::fail_qp`] for any of this virtual QP's QPs there. Returns whether it
    /// had one.
    pub fn fail_device(&mut self, device: u8, status: WcStatus) -> bool {
        let ours = self
            .lanes
            .data
            .iter()
            .chain(self.lanes.notify.iter())
            .any(|l| l.device == device);
        if !ours {
            return false;
        }
        if self
            .lanes
            .notify
            .as_ref()
            .is_some_and(|l| l.device == device)
            && !self.try_survive_notify(status)
        {
            self.fail(status);
            return true;
        }
        for k in 0..self.lanes.data.len() {
            let lane = &self.lanes.data[k];
            if lane.device == device && !self.try_survive(k, status) {
                self.fail(status);
                break;
            }
        }
        true
    }

    /// Mark the virtual QP failed with `status` (the first error wins): requests not
    /// fully posted stop and will report an error; nothing new is taken.
    pub(super) fn fail(&mut self, status: WcStatus) {
        if self.failed.is_some() {
            return;
        }
        self.failed = Some(status);
        for id in self.tx.dispatch..self.tx.slots.tail {
            let slot = self.tx.slots.get_mut(id);
            slot.target = slot.posted;
            slot.fail(WcStatus::WR_FLUSH_ERR);
        }
        self.tx.dispatch = self.tx.slots.tail;
        // Runs failed QPs left for re-dispatch will not be posted now.
        self.drop_redo(WcStatus::WR_FLUSH_ERR);
        self.settle_counted(WcStatus::WR_FLUSH_ERR);
        self.rec.release();
        self.fail_recvs(status);
        // Flush whatever is outstanding on every QP, so each request is reported.
        for lane in self
            .lanes
            .data
            .iter_mut()
            .chain(self.lanes.notify.iter_mut())
        {
            lane.qp.set_error();
        }
    }
}
