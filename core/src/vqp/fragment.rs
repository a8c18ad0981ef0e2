//! What a request's WQEs are made of: the physical wr_id, whether its fragments are
//! numbered, the WQE of a pass-through request, what every fragment shares, and the
//! WQE of an application's receive.

use super::config::Mode;
use crate::imm::Imm;
use crate::phys::{RecvWqe, SendWqe};
use crate::seq::Seq;
use crate::wr::{Opcode, RecvWr, SendFlags, SendWr};
use crate::wrid::{Kind, WrId};

/// Whether a pass-through `op` consumes a receive of the peer's.
#[inline]
pub(super) fn consumes(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::SEND | Opcode::SEND_WITH_IMM | Opcode::RDMA_WRITE_WITH_IMM
    )
}

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

/// What every fragment of one request shares.
pub(super) struct Spread {
    pub(super) id: u64,
    /// The request's physical wr_id with lane 0.
    base_id: u64,
    opcode: Opcode,
    fence: SendFlags,
    /// Flags of the last fragment (DQPLB adds `SOLICITED` when asked).
    pub(super) last_flags: SendFlags,
    pub(super) dqplb_imm: bool,
    pub(super) local: u64,
    pub(super) remote: u64,
}

impl Spread {
    /// What the fragments of request `id` (`wr`, on the virtual QP tagged `tag`) share.
    #[inline]
    pub(super) fn of(wr: &SendWr, id: u64, tag: u8, mode: Mode) -> Self {
        let dqplb_imm = numbered(wr, mode);
        let fence = SendFlags(wr.flags.0 & SendFlags::FENCE.0);
        Self {
            id,
            base_id: send_id(tag, id),
            opcode: match wr.opcode {
                Opcode::RDMA_READ => Opcode::RDMA_READ,
                _ if dqplb_imm => Opcode::RDMA_WRITE_WITH_IMM,
                _ => Opcode::RDMA_WRITE,
            },
            fence,
            last_flags: if dqplb_imm {
                fence.with(SendFlags(wr.flags.0 & SendFlags::SOLICITED.0))
            } else {
                fence
            },
            dqplb_imm,
            local: wr.local_addr,
            remote: wr.remote_addr,
        }
    }

    /// Fragment `[off, off + len)` of the request for data QP `lane`, whose device's
    /// keys are `(lkey, rkey)`; `seq` is its DQPLB sequence number and `last` whether
    /// it ends the request. (The keys stay in the slot: copying all devices' keys
    /// here would cost more than looking up one pair per QP.)
    #[inline]
    pub(super) fn wqe(
        &self,
        lane: u64,
        (lkey, rkey): (u32, u32),
        off: u64,
        len: u32,
        seq: Seq,
        last: bool,
    ) -> SendWqe {
        let (imm_data, flags) = if self.dqplb_imm {
            let flags = if last { self.last_flags } else { self.fence };
            (Imm::new(seq, last).to_wire(), flags)
        } else {
            (0, self.fence)
        };
        SendWqe {
            wr_id: self.base_id | lane << 48,
            opcode: self.opcode,
            flags,
            addr: self.local + off,
            len,
            lkey,
            remote_addr: self.remote + off,
            rkey,
            imm_data,
            compare_add: 0,
            swap: 0,
        }
    }
}

/// The WQE of the application's receive `wr`, request `id`, on QP `lane` (a data QP's
/// index or `NOTIFY_LANE`) of the virtual QP tagged `tag`.
pub(super) fn app_recv_wqe(tag: u8, lane: u8, id: u64, wr: &RecvWr) -> RecvWqe {
    RecvWqe {
        wr_id: WrId {
            tag,
            lane,
            kind: Kind::Recv,
            id,
        }
        .encode(),
        addr: wr.addr,
        len: wr.len,
        lkey: wr.lkey,
    }
}
