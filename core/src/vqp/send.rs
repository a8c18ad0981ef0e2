//! The send side's entry: validating a request and accepting it whole or not at all.
//! Dispatch (`dispatch`) and completion (`complete`) are beside it.

use super::slots::Notify;
use super::{Mode, PostSendError, VirtualQp};
use crate::phys::{PhysQp, SendWqe};
use crate::split::{Plan, MAX_WQE_BYTES};
use crate::wr::{Opcode, SendFlags, SendWr, WcStatus};
use crate::wrid::{Kind, WrId};

/// The physical wr_id of request `id`'s send WQEs on data QP 0 of the virtual QP
/// tagged `tag` (other data QPs add their index at bit 48).
#[inline]
pub(super) fn send_id(tag: u8, id: u64) -> u64 {
    WrId {
        tag,
        lane: 0,
        kind: Kind::Send,
        id,
    }
    .encode()
}

/// Whether the fragments of `wr` carry DQPLB sequence numbers.
#[inline]
pub(super) fn numbered(wr: &SendWr, mode: Mode) -> bool {
    mode == Mode::Dqplb && wr.opcode == Opcode::RDMA_WRITE_WITH_IMM
}

/// The WQE of a request that passes through whole, with wr_id `wr_id` and the keys
/// of `device`.
#[inline]
pub(super) fn passthrough_wqe(wr: &SendWr, wr_id: u64, device: u8) -> SendWqe {
    let (lkey, rkey) = wr.keys.pair(device);
    SendWqe {
        wr_id,
        opcode: wr.opcode,
        flags: wr.flags,
        addr: wr.local_addr,
        len: wr.len as u32,
        lkey,
        remote_addr: wr.remote_addr,
        rkey,
        imm_data: wr.imm_data,
        compare_add: wr.compare_add,
        swap: wr.swap,
    }
}

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    /// Take one send request and post what fits now. A refused request posted
    /// nothing; an accepted one is reported exactly once (if signaled or failed).
    ///
    /// RDMA_WRITE, RDMA_WRITE_WITH_IMM and RDMA_READ are cut into fragments across
    /// the data QPs when there are several; SEND, SEND_WITH_IMM and the atomics pass
    /// through to data QP 0 (and so do all opcodes with one data QP).
    pub fn post_send(&mut self, wr: &SendWr) -> Result<(), PostSendError> {
        self.accept(wr)?;
        if !self.post_alone() {
            self.dispatch();
        }
        Ok(())
    }

    /// Take several send requests and post what fits with one chain per QP. Stops at
    /// the first refused request: `Err((i, e))` means `wrs[..i]` were taken and
    /// `wrs[i..]` posted nothing.
    pub fn post_send_many(&mut self, wrs: &[SendWr]) -> Result<(), (usize, PostSendError)> {
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(e) = self.accept(wr) {
                result = Err((i, e));
                break;
            }
        }
        self.dispatch();
        result
    }

    /// Whether `wr` passes through whole (`true`) or is fragmented, or why it is refused.
    fn classify(&self, wr: &SendWr) -> Result<bool, PostSendError> {
        let op = wr.opcode;
        if op.name().is_none() {
            return Err(PostSendError::UnknownOpcode(op));
        }
        let several = self.lanes.len() > 1;
        let (passthrough, devices) = if several && op.is_rdma() {
            if wr.len == 0 {
                return Err(PostSendError::ZeroLength);
            }
            if !wr.flags.contains(SendFlags::SIGNALED) && op != Opcode::RDMA_WRITE_WITH_IMM {
                return Err(PostSendError::Unsignaled(op));
            }
            let notify_dev = if op == Opcode::RDMA_WRITE_WITH_IMM {
                self.notify_device
            } else {
                0
            };
            (false, self.data_devices | notify_dev)
        } else {
            let is_send = matches!(op, Opcode::SEND | Opcode::SEND_WITH_IMM);
            if is_send && several && self.cfg.mode == Mode::Dqplb {
                return Err(PostSendError::SendNeedsSpray);
            }
            if wr.len > MAX_WQE_BYTES {
                return Err(PostSendError::TooLong(wr.len));
            }
            let touches_keys = !is_send || (wr.len > 0 && !wr.flags.contains(SendFlags::INLINE));
            (
                true,
                if touches_keys {
                    1 << self.lanes[0].device
                } else {
                    0
                },
            )
        };
        let missing = devices & !wr.keys.present();
        if missing != 0 {
            return Err(PostSendError::MissingKey {
                device: missing.trailing_zeros() as u8,
            });
        }
        Ok(passthrough)
    }

    /// Validate `wr` and give it a slot; posts nothing.
    fn accept(&mut self, wr: &SendWr) -> Result<(), PostSendError> {
        if let Some(st) = self.failed {
            return Err(PostSendError::Failed(st));
        }
        let passthrough = self.classify(wr)?;
        if passthrough && self.lanes[0].survived && self.cfg.grace_ns == 0 {
            // Pass-through opcodes go to data QP 0, which failed (re-dispatch), and
            // nothing waits for it to come back. With a grace period they are held
            // until it does (later requests go on meanwhile; their completions wait,
            // in order) or the grace period ends.
            return Err(PostSendError::Failed(self.lane_error));
        }
        if self.send.is_full() {
            return Err(PostSendError::Full);
        }
        let spray_imm = self.notify_device != 0 && wr.opcode == Opcode::RDMA_WRITE_WITH_IMM;
        let id = self.send.tail;
        let plan = if passthrough {
            Plan::whole(wr.len)
        } else {
            let plan = self.cfg.split.plan(wr.len, wr.remote_addr);
            if plan.count() > u64::from(u32::MAX) {
                return Err(PostSendError::TooManyFragments {
                    len: wr.len,
                    fragments: plan.count(),
                });
            }
            plan
        };
        // Field by field: a whole-slot assignment would build the slot on the stack
        // first and copy it.
        let slot = self.send.get_mut(id);
        slot.wr = *wr;
        slot.plan = plan;
        slot.posted = 0;
        slot.offset = 0;
        slot.done = 0;
        slot.target = plan.count() as u32;
        slot.passthrough = passthrough;
        slot.status = WcStatus::SUCCESS;
        slot.notify = if spray_imm && !passthrough {
            Notify::Waiting
        } else {
            Notify::None
        };
        self.send.tail += 1;
        Ok(())
    }
}
