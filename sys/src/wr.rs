//! Work requests: scatter/gather entries, send and receive work requests.

use core::ffi::{c_int, c_uint, c_void};

use super::{__be32, ibv_ah, ibv_mr, ibv_mw, zeroed_default};

/// `enum ibv_wr_opcode`: RDMA WRITE.
pub const IBV_WR_RDMA_WRITE: c_uint = 0;
/// `enum ibv_wr_opcode`: RDMA WRITE with immediate.
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
/// `enum ibv_wr_opcode`: SEND.
pub const IBV_WR_SEND: c_uint = 2;
/// `enum ibv_wr_opcode`: SEND with immediate.
pub const IBV_WR_SEND_WITH_IMM: c_uint = 3;
/// `enum ibv_wr_opcode`: RDMA READ.
pub const IBV_WR_RDMA_READ: c_uint = 4;
/// `enum ibv_wr_opcode`: atomic compare and swap.
pub const IBV_WR_ATOMIC_CMP_AND_SWP: c_uint = 5;
/// `enum ibv_wr_opcode`: atomic fetch and add.
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_uint = 6;
/// `enum ibv_wr_opcode`: local invalidate.
pub const IBV_WR_LOCAL_INV: c_uint = 7;
/// `enum ibv_wr_opcode`: bind memory window.
pub const IBV_WR_BIND_MW: c_uint = 8;
/// `enum ibv_wr_opcode`: SEND with invalidate.
pub const IBV_WR_SEND_WITH_INV: c_uint = 9;
/// `enum ibv_wr_opcode`: TCP segmentation offload.
pub const IBV_WR_TSO: c_uint = 10;
/// `enum ibv_wr_opcode`: driver-specific.
pub const IBV_WR_DRIVER1: c_uint = 11;
/// `enum ibv_wr_opcode`: atomic write.
pub const IBV_WR_ATOMIC_WRITE: c_uint = 15;

/// `enum ibv_send_flags`: fence.
pub const IBV_SEND_FENCE: c_uint = 1;
/// `enum ibv_send_flags`: generate a completion.
pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;
/// `enum ibv_send_flags`: solicited event.
pub const IBV_SEND_SOLICITED: c_uint = 1 << 2;
/// `enum ibv_send_flags`: data inline in the WQE.
pub const IBV_SEND_INLINE: c_uint = 1 << 3;
/// `enum ibv_send_flags`: IP checksum offload.
pub const IBV_SEND_IP_CSUM: c_uint = 1 << 4;

/// `struct ibv_sge`: one scatter/gather entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_sge {
    /// Start address of the local buffer.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region holding it.
    pub lkey: u32,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mw_bind_info {
    /// Memory region the window binds into.
    pub mr: *mut ibv_mr,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// `enum ibv_access_flags` bits.
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind`: argument of `ops.bind_mw`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mw_bind {
    /// Work request id.
    pub wr_id: u64,
    /// `enum ibv_send_flags` bits.
    pub send_flags: c_uint,
    /// What to bind.
    pub bind_info: ibv_mw_bind_info,
}

/// The anonymous `imm_data` / `invalidate_rkey` union of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_imm {
    /// Immediate data, network byte order (`*_WITH_IMM` opcodes).
    pub imm_data: __be32,
    /// Rkey to invalidate (`*_INV` opcodes).
    pub invalidate_rkey: u32,
}

/// `wr.rdma` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_send_wr_rdma {
    /// Remote address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `wr.atomic` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_send_wr_atomic {
    /// Remote address (8-byte aligned).
    pub remote_addr: u64,
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP).
    pub swap: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `wr.ud` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_ud {
    /// Address handle of the destination.
    pub ah: *mut ibv_ah,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

/// The `wr` union of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    /// RDMA READ/WRITE.
    pub rdma: ibv_send_wr_rdma,
    /// Atomics.
    pub atomic: ibv_send_wr_atomic,
    /// UD sends.
    pub ud: ibv_send_wr_ud,
}

/// `qp_type.xrc` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_send_wr_xrc {
    /// Remote SRQ number.
    pub remote_srqn: u32,
}

/// The `qp_type` union of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_qp_type {
    /// XRC.
    pub xrc: ibv_send_wr_xrc,
}

/// `bind_mw` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_bind_mw {
    /// Window to bind.
    pub mw: *mut ibv_mw,
    /// New rkey.
    pub rkey: u32,
    /// What to bind.
    pub bind_info: ibv_mw_bind_info,
}

/// `tso` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_tso {
    /// Header buffer.
    pub hdr: *mut c_void,
    /// Header size.
    pub hdr_sz: u16,
    /// Maximum segment size.
    pub mss: u16,
}

/// The anonymous `bind_mw` / `tso` union at the end of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_bind_mw_tso {
    /// Memory window bind.
    pub bind_mw: ibv_send_wr_bind_mw,
    /// TSO.
    pub tso: ibv_send_wr_tso,
}

/// `struct ibv_send_wr`: one send-queue work request, possibly chained through `next`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    /// Caller's id, returned in the completion.
    pub wr_id: u64,
    /// Next request of the chain, or null.
    pub next: *mut ibv_send_wr,
    /// Scatter/gather list.
    pub sg_list: *mut ibv_sge,
    /// Entries in `sg_list`.
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode` (`IBV_WR_*`).
    pub opcode: c_uint,
    /// `enum ibv_send_flags` bits (`IBV_SEND_*`).
    pub send_flags: c_uint,
    /// Immediate data or rkey to invalidate (C: anonymous union).
    pub imm: ibv_send_wr_imm,
    /// Opcode-specific addressing.
    pub wr: ibv_send_wr_wr,
    /// QP-type-specific addressing.
    pub qp_type: ibv_send_wr_qp_type,
    /// Memory window bind or TSO (C: anonymous union).
    pub bind_mw_tso: ibv_send_wr_bind_mw_tso,
}

impl core::fmt::Debug for ibv_send_wr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: both members of `imm` are `u32`s over the same 4 bytes.
        let imm = unsafe { self.imm.imm_data };
        // SAFETY: `rdma` is a prefix of the union's bytes made of integers only, and every
        // bit pattern is a valid integer; the union is at least that large.
        let rdma = unsafe { self.wr.rdma };
        f.debug_struct("ibv_send_wr")
            .field("wr_id", &self.wr_id)
            .field("next", &self.next)
            .field("sg_list", &self.sg_list)
            .field("num_sge", &self.num_sge)
            .field("opcode", &self.opcode)
            .field("send_flags", &self.send_flags)
            .field("imm", &imm)
            .field("wr.rdma", &rdma)
            .finish_non_exhaustive()
    }
}

/// `struct ibv_recv_wr`: one receive-queue work request, possibly chained.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_recv_wr {
    /// Caller's id, returned in the completion.
    pub wr_id: u64,
    /// Next request of the chain, or null.
    pub next: *mut ibv_recv_wr,
    /// Scatter list.
    pub sg_list: *mut ibv_sge,
    /// Entries in `sg_list`.
    pub num_sge: c_int,
}

zeroed_default!(
    ibv_mw_bind_info,
    ibv_mw_bind,
    ibv_send_wr_imm,
    ibv_send_wr_ud,
    ibv_send_wr_wr,
    ibv_send_wr_qp_type,
    ibv_send_wr_bind_mw,
    ibv_send_wr_tso,
    ibv_send_wr_bind_mw_tso,
    ibv_send_wr,
    ibv_recv_wr,
);
