//! Surviving a data QP's failure (`Config::redispatch`): the failed QP's fragments
//! that did not complete are posted again on the QPs that remain, and the virtual
//! QP runs on with fewer paths.
//!
//! RDMA WRITE and READ of the same range are idempotent, and a re-posted DQPLB
//! fragment keeps its sequence number, which the receiver's window counts once (an
//! arrival it already counted is a duplicate), so posting a fragment twice is
//! harmless. What is not idempotent (SEND, atomics: the pass-through opcodes) is not
//! posted again: such a request on the failed QP is reported with the error.

use super::complete::credit_data;
use super::dispatch::{after, pick, Spread};
use super::VirtualQp;
use crate::phys::PhysQp;
use crate::wr::{SendFlags, WcStatus};

/// What a virtual QP survived (with [`Config::redispatch`](super::Config::redispatch)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Failover {
    /// Data QPs that failed while others went on.
    pub failovers: u32,
    /// Fragments posted again on another data QP.
    pub redispatched: u64,
    /// Data QPs healthy now.
    pub healthy: u32,
}

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// What the virtual QP survived so far.
    pub fn failover(&self) -> Failover {
        Failover {
            healthy: self.lanes.iter().filter(|l| !l.failed).count() as u32,
            ..self.survived
        }
    }

    /// Whether data QP `lane` failing with `status` is survived (re-dispatch is on
    /// and another data QP is healthy); if so it is failed alone.
    pub(super) fn survive(&mut self, lane: usize, status: WcStatus) -> bool {
        if !self.cfg.redispatch
            || self.failed.is_some()
            || !self
                .lanes
                .iter()
                .enumerate()
                .any(|(i, l)| i != lane && !l.failed)
        {
            return false;
        }
        let l = &mut self.lanes[lane];
        let first = !l.survived;
        l.failed = true;
        l.survived = true;
        if first {
            l.qp.set_error();
            self.survived.failovers += 1;
        }
        self.room &= !(1 << lane);
        self.redo |= 1 << lane;
        self.lane_error = status;
        // A request held to the QPs it used (the fan-out limit) may use another.
        for id in self.send.head..self.send.tail {
            self.send.get_mut(id).used &= !(1 << lane);
        }
        true
    }

    /// Stage again, on healthy data QPs with room, the fragments failed QPs left:
    /// oldest first per QP, round-robin, each WQE signaled and a run of its own. A
    /// pass-through request's WQE is not posted again: it is credited with the
    /// failure.
    pub(super) fn restage(&mut self) {
        while self.redo != 0 && self.room != 0 {
            let k = self.redo.trailing_zeros() as usize;
            let Some(run) = self.lanes[k].oldest_run() else {
                self.redo &= !(1 << k);
                continue;
            };
            let slot = self.send.get(run.id);
            if slot.passthrough {
                self.lanes[k].take_run(run.count);
                credit_data(&mut self.send, run.id, run.count, self.lane_error);
                continue;
            }
            let req = Spread::of(&slot.wr, run.id, self.tag, self.cfg.mode);
            let plan = slot.plan;
            let count = plan.count();
            let mut done = 0;
            while done < run.count && self.room != 0 {
                let f = run.first.wrapping_add(done.wrapping_mul(run.stride));
                let seq = run.seq.add(f.wrapping_sub(run.first));
                let l = pick(self.room, self.next_lane);
                self.next_lane = after(l, self.lanes.len());
                let lane = &mut self.lanes[l];
                let (off, len) = plan.fragment(u64::from(f));
                let keys = self.send.get(run.id).wr.keys.pair(lane.device);
                let last = u64::from(f) + 1 == count;
                let mut wqe = req.wqe(l as u64, keys, off, len, seq, last);
                // Signaled, and a run of its own that nothing joins: runs of one
                // request from several failed QPs may interleave with others here,
                // and a completion credits the oldest run of the request it names.
                wqe.flags = wqe.flags.with(SendFlags::SIGNALED);
                *lane.stage(run.id, seq, false, len, f) = wqe;
                lane.close_run();
                self.staged |= 1 << l;
                if !lane.has_room(self.cfg.max_outstanding) {
                    self.room &= !(1 << l);
                }
                done += 1;
            }
            self.survived.redispatched += u64::from(done);
            self.lanes[k].take_run(done);
        }
    }
}
