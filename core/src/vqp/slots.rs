//! Fixed rings of virtual request slots, indexed by a monotonically increasing id.

use super::fragment::consumes;
use crate::split::Plan;
use crate::wr::{RecvWr, SendFlags, SendWr, WcOpcode, WcStatus};

/// Where a SPRAY request's notify stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notify {
    /// The request needs none.
    None,
    /// To be posted once every data fragment completed and earlier notifies went.
    Waiting,
    /// Posted on the notify QP.
    InFlight,
    /// Posted on a QP that failed before a completion said it landed, and it
    /// consumes a receive of the peer's (the notify itself, or a pass-through SEND
    /// marked so): the peer's count of receives completed decides, when the QP is
    /// replaced.
    Unsure,
    /// Completed, or abandoned because the request failed.
    Settled,
}

/// One virtual send request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendSlot {
    pub wr: SendWr,
    pub plan: Plan,
    /// Fragments staged or posted (a request has at most `u32::MAX`, which
    /// `post_send` checks: run figures name fragments by `u32` too).
    pub posted: u32,
    /// Where the next fragment starts in the request.
    pub offset: u64,
    /// Fragments whose completion (own or implied) arrived.
    pub done: u32,
    /// Fragments that will be posted in all: the plan's count, or what was posted
    /// when the virtual QP failed. `done ≤ posted ≤ target`.
    pub target: u32,
    /// Goes whole to data QP 0 as the application gave it.
    pub passthrough: bool,
    /// Data QPs its fragments were staged on (bit per QP), for the fan-out limit;
    /// cleared by the first dispatch round that reaches the request.
    pub used: u64,
    /// First error seen, or success.
    pub status: WcStatus,
    pub notify: Notify,
    /// Its place among the WQEs of its QP that consume a receive of the peer's (its
    /// notify on the notify QP, itself as a pass-through SEND on data QP 0), mod
    /// 2^32, once posted.
    pub order: u32,
}

impl SendSlot {
    pub const EMPTY: Self = Self {
        wr: SendWr::new(0, crate::Opcode::RDMA_WRITE, 0, 0, 0, crate::Keys::none()),
        plan: Plan::whole(0),
        posted: 0,
        offset: 0,
        done: 0,
        target: 0,
        passthrough: false,
        used: 0,
        status: WcStatus::SUCCESS,
        notify: Notify::None,
        order: 0,
    };

    /// The plan's fragments, as the `u32` that `post_send` checked they fit.
    #[inline]
    pub fn fragments(&self) -> u32 {
        self.plan.count() as u32
    }

    /// Every fragment that will ever be posted was posted and has completed.
    #[inline]
    pub fn data_settled(&self) -> bool {
        self.done == self.target
    }

    #[inline]
    pub fn complete(&self) -> bool {
        self.data_settled() && matches!(self.notify, Notify::None | Notify::Settled)
    }

    #[inline]
    pub fn fail(&mut self, status: WcStatus) {
        if self.status.is_ok() {
            self.status = status;
        }
    }
}

/// One virtual receive request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvSlot {
    pub wr: RecvWr,
    pub done: bool,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u64,
    pub imm_data: Option<u32>,
}

impl RecvSlot {
    pub const EMPTY: Self = Self {
        wr: RecvWr::notification(0),
        done: false,
        status: WcStatus::SUCCESS,
        opcode: WcOpcode::RECV,
        byte_len: 0,
        imm_data: None,
    };

    pub fn finish(
        &mut self,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u64,
        imm_data: Option<u32>,
    ) {
        self.done = true;
        self.status = status;
        self.opcode = opcode;
        self.byte_len = byte_len;
        self.imm_data = imm_data;
    }
}

/// A ring of `S` slots. Ids grow without bound (u64); `id % S` is the slot.
/// Cursors: `head ≤ a ≤ b ≤ tail`, each an id; `tail - head ≤ S`.
pub(crate) struct Ring<T, const S: usize> {
    pub slots: [T; S],
    /// Oldest request not yet reported.
    pub head: u64,
    /// Next id to hand out.
    pub tail: u64,
}

impl<T: Copy, const S: usize> Ring<T, S> {
    const CHECK: () = assert!(S.is_power_of_two(), "slot count must be a power of two");

    pub const fn new(empty: T) -> Self {
        let () = Self::CHECK;
        Self {
            slots: [empty; S],
            head: 0,
            tail: 0,
        }
    }

    #[inline]
    pub fn is_full(&self) -> bool {
        self.tail - self.head == S as u64
    }

    #[inline]
    pub fn len(&self) -> usize {
        (self.tail - self.head) as usize
    }

    #[inline]
    pub fn get(&self, id: u64) -> &T {
        &self.slots[(id as usize) & (S - 1)]
    }

    #[inline]
    pub fn get_mut(&mut self, id: u64) -> &mut T {
        &mut self.slots[(id as usize) & (S - 1)]
    }

    /// The full id of the in-flight request whose id modulo 2^45 is `short`.
    #[inline]
    pub fn widen(&self, short: u64) -> Option<u64> {
        let off = short.wrapping_sub(self.head) & crate::wrid::ID_MASK;
        (off < self.tail - self.head).then(|| self.head + off)
    }
}

/// Credit `count` data WQEs of request `id` with `status`.
#[inline]
pub(super) fn credit_data<const S: usize>(
    send: &mut Ring<SendSlot, S>,
    id: u64,
    count: u32,
    st: WcStatus,
) {
    let slot = send.get_mut(id);
    slot.done += count;
    if !st.is_ok() {
        slot.fail(st);
    }
}

/// Credit request `id`'s notify with `status`.
#[inline]
pub(super) fn credit_notify<const S: usize>(
    send: &mut Ring<SendSlot, S>,
    id: u64,
    _: u32,
    st: WcStatus,
) {
    let slot = send.get_mut(id);
    slot.notify = Notify::Settled;
    if !st.is_ok() {
        slot.fail(st);
    }
}

/// A pass-through request (`count` WQEs of request `id`) that was in flight on data
/// QP 0 when it failed: with a grace period to wait for a replacement in (`wait`),
/// one that consumes a receive becomes unsure and waits, with RDMA WRITEs and READs,
/// to be posted again on the replacement (`again`); an atomic, an `INLINE` request
/// (its payload may have been lent for its post only: see
/// [`VirtualQp::post_send_inline`](crate::VirtualQp::post_send_inline)), or any
/// without a grace period, is credited with `status`. False when `again` is full (the
/// virtual QP then fails).
pub(super) fn park<const S: usize>(
    send: &mut Ring<SendSlot, S>,
    again: &mut heapless::Deque<u64, S>,
    (id, count): (u64, u32),
    wait: bool,
    status: WcStatus,
) -> bool {
    let slot = send.get_mut(id);
    let op = slot.wr.opcode;
    let inline = slot.wr.flags.contains(SendFlags::INLINE) && slot.wr.len != 0;
    if !wait || inline || !(consumes(op) || op.is_rdma()) {
        credit_data(send, id, count, status);
        return true;
    }
    if consumes(op) {
        slot.notify = Notify::Unsure;
    }
    again.push_back(id).is_ok()
}
