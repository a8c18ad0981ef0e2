//! The send side's entry: validating a request and accepting it whole or not at all.
//! Dispatch (`dispatch`) and completion (`complete`) are beside it.

use super::config::Mode;
use super::error::PostSendError;
use super::slots::Notify;
use super::VirtualQp;
use crate::phys::PhysQp;
use crate::split::{Plan, MAX_WQE_BYTES};
use crate::wr::{Opcode, SendFlags, SendWr, WcStatus};

/// Whether `wr` asks the provider to copy a payload from its raw `local_addr` (the
/// safe posts refuse it: see the [post contract](crate::phys#the-post-contract)).
#[inline(always)]
fn raw_inline(wr: &SendWr) -> bool {
    wr.flags.contains(SendFlags::INLINE) && wr.len != 0
}

/// The flags of a request to be fragmented (not empty) that is unsignaled or
/// `INLINE`: refused when unsignaled other than RDMA_WRITE_WITH_IMM, and when
/// `INLINE` with `CHECKED` (its payload would be given by raw address; unchecked, the
/// flag is dropped: fragments are posted by key).
#[inline]
fn fragment_flags<const CHECKED: bool>(wr: &SendWr) -> Result<(), PostSendError> {
    if CHECKED && wr.flags.contains(SendFlags::INLINE) {
        return Err(PostSendError::RawInline);
    }
    if !wr.flags.contains(SendFlags::SIGNALED) && wr.opcode != Opcode::RDMA_WRITE_WITH_IMM {
        return Err(PostSendError::Unsignaled(wr.opcode));
    }
    Ok(())
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
    ///
    /// Every address the request names is checked by the device against its keys
    /// (see the [post contract](crate::phys#the-post-contract)), so this is safe. An
    /// `INLINE` request with a payload is refused with [`PostSendError::RawInline`]:
    /// its payload would be copied from `local_addr` by the CPU, unchecked. Give it as
    /// a slice to [`post_send_inline`](Self::post_send_inline) instead.
    pub fn post_send(&mut self, wr: &SendWr) -> Result<(), PostSendError> {
        self.accept::<true>(wr)?;
        if !self.post_alone() {
            self.dispatch();
        }
        Ok(())
    }

    /// [`post_send`](Self::post_send) that also takes an `INLINE` request whose
    /// payload it names by `local_addr`.
    ///
    /// # Safety
    /// When `wr` has [`SendFlags::INLINE`] and `len > 0`, `local_addr..local_addr +
    /// len` is initialised memory of this process that stays readable, and is not
    /// written, until the request is posted to data QP 0. It may wait for that (behind
    /// earlier requests, for room, or for data QP 0's replacement in a grace period);
    /// it has been posted, or will never be, once the virtual QP reports the
    /// completion of this request or of a later one, or fails, or is dropped.
    /// Requests without an inline payload need nothing beyond the
    /// [post contract](crate::phys#the-post-contract)'s keys.
    ///
    /// ```compile_fail,E0133
    /// # use vqp_core::{PhysQp, SendWr, VirtualQp};
    /// // The unchecked post needs `unsafe`: a safe caller cannot vouch for an address.
    /// fn post<Q: PhysQp>(vqp: &mut VirtualQp<Q>, wr: &SendWr) {
    ///     let _ = vqp.post_send_unchecked(wr);
    /// }
    /// ```
    pub unsafe fn post_send_unchecked(&mut self, wr: &SendWr) -> Result<(), PostSendError> {
        self.accept::<false>(wr)?;
        if !self.post_alone() {
            self.dispatch();
        }
        Ok(())
    }

    /// Post one request whose payload is `payload`, copied into the WQE by the
    /// provider (`INLINE`) before this call returns: `wr`'s `local_addr`, `len` and
    /// the `INLINE` flag are taken from the slice, so the payload is never read
    /// after the borrow ends.
    ///
    /// The request must pass through whole to data QP 0: SEND or SEND_WITH_IMM, or
    /// RDMA_WRITE / RDMA_WRITE_WITH_IMM over one data QP ([`PostSendError::CannotInline`]
    /// otherwise), and go now: while earlier requests wait, data QP 0 has no room or
    /// is being replaced, it is refused with [`PostSendError::Full`]. The provider's
    /// own limit (`max_inline_data`) still applies: a longer payload is refused by
    /// the post and fails the virtual QP, as any refused post does. An inline request
    /// in flight on a data QP that fails is reported with the error, never posted
    /// again.
    pub fn post_send_inline(&mut self, wr: &SendWr, payload: &[u8]) -> Result<(), PostSendError> {
        let wr = SendWr {
            local_addr: payload.as_ptr() as u64,
            len: payload.len() as u64,
            flags: wr.flags.with(SendFlags::INLINE),
            ..*wr
        };
        if let Some(st) = self.failed {
            return Err(PostSendError::Failed(st));
        }
        let op = wr.opcode;
        if !matches!(
            op,
            Opcode::SEND | Opcode::SEND_WITH_IMM | Opcode::RDMA_WRITE | Opcode::RDMA_WRITE_WITH_IMM
        ) {
            return Err(match op.name() {
                Some(_) => PostSendError::CannotInline(op),
                None => PostSendError::UnknownOpcode(op),
            });
        }
        if !self.classify::<false>(&wr)? {
            return Err(PostSendError::CannotInline(op));
        }
        let qp0 = &self.lanes.data[0];
        if self.tx.dispatch != self.tx.slots.tail
            || self.rec.pending()
            || qp0.failed
            || !qp0.has_room()
        {
            return Err(PostSendError::Full);
        }
        self.take(&wr, true)?;
        if !self.post_alone() {
            self.dispatch();
        }
        // Nothing waited before it and data QP 0 had room: the request was posted (or
        // refused by the provider, which failed the virtual QP), not left waiting.
        debug_assert_eq!(self.tx.dispatch, self.tx.slots.tail);
        Ok(())
    }

    /// Take several send requests and post what fits with one chain per QP. Stops at
    /// the first refused request: `Err((i, e))` means `wrs[..i]` were taken and
    /// `wrs[i..]` posted nothing. As in [`post_send`](Self::post_send), an `INLINE`
    /// request with a payload is refused ([`PostSendError::RawInline`]).
    pub fn post_send_many(&mut self, wrs: &[SendWr]) -> Result<(), (usize, PostSendError)> {
        self.take_many::<true>(wrs)
    }

    /// [`post_send_many`](Self::post_send_many) that also takes `INLINE` requests
    /// whose payloads it names by `local_addr`.
    ///
    /// # Safety
    /// As [`post_send_unchecked`](Self::post_send_unchecked), for every request of
    /// `wrs` that is taken.
    pub unsafe fn post_send_many_unchecked(
        &mut self,
        wrs: &[SendWr],
    ) -> Result<(), (usize, PostSendError)> {
        self.take_many::<false>(wrs)
    }

    /// Accept `wrs` up to the first refused (with `CHECKED`, one with a raw inline
    /// payload is refused), then run one dispatch round.
    fn take_many<const CHECKED: bool>(
        &mut self,
        wrs: &[SendWr],
    ) -> Result<(), (usize, PostSendError)> {
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(e) = self.accept::<CHECKED>(wr) {
                result = Err((i, e));
                break;
            }
        }
        self.dispatch();
        result
    }

    /// Whether `wr` passes through whole (`true`) or is fragmented, or why it is
    /// refused; `CHECKED` (the safe posts) refuses a raw inline payload.
    #[inline(always)]
    fn classify<const CHECKED: bool>(&self, wr: &SendWr) -> Result<bool, PostSendError> {
        let op = wr.opcode;
        if op.name().is_none() {
            return Err(PostSendError::UnknownOpcode(op));
        }
        let several = self.lanes.data.len() > 1;
        let (passthrough, devices) = if several && op.is_rdma() {
            if wr.len == 0 {
                return Err(PostSendError::ZeroLength);
            }
            // One test for the usual flags (signaled, not inline): the rest are sorted
            // out apart, off the common path.
            if wr.flags.0 & (SendFlags::SIGNALED.0 | SendFlags::INLINE.0) != SendFlags::SIGNALED.0 {
                fragment_flags::<CHECKED>(wr)?;
            }
            let notify_dev = if op == Opcode::RDMA_WRITE_WITH_IMM {
                self.lanes.notify_device
            } else {
                0
            };
            (false, self.lanes.data_devices | notify_dev)
        } else {
            let is_send = matches!(op, Opcode::SEND | Opcode::SEND_WITH_IMM);
            if is_send && several && self.cfg.mode == Mode::Dqplb {
                return Err(PostSendError::SendNeedsSpray);
            }
            if wr.len > MAX_WQE_BYTES {
                return Err(PostSendError::TooLong(wr.len));
            }
            if CHECKED && raw_inline(wr) {
                return Err(PostSendError::RawInline);
            }
            let touches_keys = !is_send || (wr.len > 0 && !wr.flags.contains(SendFlags::INLINE));
            (
                true,
                if touches_keys {
                    1 << self.lanes.data[0].device
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

    /// Validate `wr` and give it a slot; posts nothing. `CHECKED` (the safe posts)
    /// refuses a raw inline payload.
    fn accept<const CHECKED: bool>(&mut self, wr: &SendWr) -> Result<(), PostSendError> {
        if let Some(st) = self.failed {
            return Err(PostSendError::Failed(st));
        }
        let passthrough = self.classify::<CHECKED>(wr)?;
        self.take(wr, passthrough)
    }

    /// Give `wr`, classified (`passthrough` whole or fragmented) on a virtual QP that
    /// has not failed, a slot; posts nothing.
    #[inline(always)]
    fn take(&mut self, wr: &SendWr, passthrough: bool) -> Result<(), PostSendError> {
        if passthrough && self.lanes.data[0].survived && self.cfg.grace_ns == 0 {
            // Pass-through opcodes go to data QP 0, which failed (re-dispatch), and
            // nothing waits for it to come back. With a grace period they are held
            // until it does (later requests go on meanwhile; their completions wait,
            // in order) or the grace period ends.
            return Err(PostSendError::Failed(self.rec.error()));
        }
        if self.tx.slots.is_full() {
            return Err(PostSendError::Full);
        }
        let spray_imm = self.lanes.notify_device != 0 && wr.opcode == Opcode::RDMA_WRITE_WITH_IMM;
        let id = self.tx.slots.tail;
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
        let slot = self.tx.slots.get_mut(id);
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
        self.tx.slots.tail += 1;
        Ok(())
    }
}
