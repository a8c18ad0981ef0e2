//! Work completions.

use core::ffi::c_uint;

use super::{__be32, zeroed_default};

/// `enum ibv_wc_status`: success.
pub const IBV_WC_SUCCESS: c_uint = 0;
/// `enum ibv_wc_status`: local length error.
pub const IBV_WC_LOC_LEN_ERR: c_uint = 1;
/// `enum ibv_wc_status`: local QP operation error.
pub const IBV_WC_LOC_QP_OP_ERR: c_uint = 2;
/// `enum ibv_wc_status`: local EE context operation error.
pub const IBV_WC_LOC_EEC_OP_ERR: c_uint = 3;
/// `enum ibv_wc_status`: local protection error.
pub const IBV_WC_LOC_PROT_ERR: c_uint = 4;
/// `enum ibv_wc_status`: work request flushed.
pub const IBV_WC_WR_FLUSH_ERR: c_uint = 5;
/// `enum ibv_wc_status`: memory window bind error.
pub const IBV_WC_MW_BIND_ERR: c_uint = 6;
/// `enum ibv_wc_status`: bad response.
pub const IBV_WC_BAD_RESP_ERR: c_uint = 7;
/// `enum ibv_wc_status`: local access error.
pub const IBV_WC_LOC_ACCESS_ERR: c_uint = 8;
/// `enum ibv_wc_status`: remote invalid request.
pub const IBV_WC_REM_INV_REQ_ERR: c_uint = 9;
/// `enum ibv_wc_status`: remote access error.
pub const IBV_WC_REM_ACCESS_ERR: c_uint = 10;
/// `enum ibv_wc_status`: remote operation error.
pub const IBV_WC_REM_OP_ERR: c_uint = 11;
/// `enum ibv_wc_status`: transport retry counter exceeded.
pub const IBV_WC_RETRY_EXC_ERR: c_uint = 12;
/// `enum ibv_wc_status`: RNR retry counter exceeded.
pub const IBV_WC_RNR_RETRY_EXC_ERR: c_uint = 13;
/// `enum ibv_wc_status`: local RDD violation.
pub const IBV_WC_LOC_RDD_VIOL_ERR: c_uint = 14;
/// `enum ibv_wc_status`: remote invalid RD request.
pub const IBV_WC_REM_INV_RD_REQ_ERR: c_uint = 15;
/// `enum ibv_wc_status`: remote abort.
pub const IBV_WC_REM_ABORT_ERR: c_uint = 16;
/// `enum ibv_wc_status`: invalid EE context number.
pub const IBV_WC_INV_EECN_ERR: c_uint = 17;
/// `enum ibv_wc_status`: invalid EE context state.
pub const IBV_WC_INV_EEC_STATE_ERR: c_uint = 18;
/// `enum ibv_wc_status`: fatal error.
pub const IBV_WC_FATAL_ERR: c_uint = 19;
/// `enum ibv_wc_status`: response timeout.
pub const IBV_WC_RESP_TIMEOUT_ERR: c_uint = 20;
/// `enum ibv_wc_status`: general error.
pub const IBV_WC_GENERAL_ERR: c_uint = 21;
/// `enum ibv_wc_status`: tag matching error.
pub const IBV_WC_TM_ERR: c_uint = 22;
/// `enum ibv_wc_status`: tag matching rendezvous incomplete.
pub const IBV_WC_TM_RNDV_INCOMPLETE: c_uint = 23;

/// `enum ibv_wc_opcode`: SEND completed.
pub const IBV_WC_SEND: c_uint = 0;
/// `enum ibv_wc_opcode`: RDMA WRITE completed.
pub const IBV_WC_RDMA_WRITE: c_uint = 1;
/// `enum ibv_wc_opcode`: RDMA READ completed.
pub const IBV_WC_RDMA_READ: c_uint = 2;
/// `enum ibv_wc_opcode`: compare and swap completed.
pub const IBV_WC_COMP_SWAP: c_uint = 3;
/// `enum ibv_wc_opcode`: fetch and add completed.
pub const IBV_WC_FETCH_ADD: c_uint = 4;
/// `enum ibv_wc_opcode`: memory window bind completed.
pub const IBV_WC_BIND_MW: c_uint = 5;
/// `enum ibv_wc_opcode`: local invalidate completed.
pub const IBV_WC_LOCAL_INV: c_uint = 6;
/// `enum ibv_wc_opcode`: TSO completed.
pub const IBV_WC_TSO: c_uint = 7;
/// `enum ibv_wc_opcode`: atomic write completed.
pub const IBV_WC_ATOMIC_WRITE: c_uint = 9;
/// `enum ibv_wc_opcode`: a receive completed (SEND at the peer). Receive opcodes all
/// have this bit set.
pub const IBV_WC_RECV: c_uint = 1 << 7;
/// `enum ibv_wc_opcode`: a receive consumed by an RDMA WRITE with immediate.
pub const IBV_WC_RECV_RDMA_WITH_IMM: c_uint = IBV_WC_RECV + 1;
/// `enum ibv_wc_opcode`: tag add.
pub const IBV_WC_TM_ADD: c_uint = IBV_WC_RECV + 2;
/// `enum ibv_wc_opcode`: tag delete.
pub const IBV_WC_TM_DEL: c_uint = IBV_WC_RECV + 3;
/// `enum ibv_wc_opcode`: tag sync.
pub const IBV_WC_TM_SYNC: c_uint = IBV_WC_RECV + 4;
/// `enum ibv_wc_opcode`: tagged receive.
pub const IBV_WC_TM_RECV: c_uint = IBV_WC_RECV + 5;
/// `enum ibv_wc_opcode`: tag not matched.
pub const IBV_WC_TM_NO_TAG: c_uint = IBV_WC_RECV + 6;
/// `enum ibv_wc_opcode`: driver-specific.
pub const IBV_WC_DRIVER1: c_uint = IBV_WC_RECV + 7;
/// `enum ibv_wc_opcode`: driver-specific.
pub const IBV_WC_DRIVER2: c_uint = IBV_WC_RECV + 8;
/// `enum ibv_wc_opcode`: driver-specific.
pub const IBV_WC_DRIVER3: c_uint = IBV_WC_RECV + 9;

/// `enum ibv_wc_flags`: a GRH is present in the receive buffer.
pub const IBV_WC_GRH: c_uint = 1;
/// `enum ibv_wc_flags`: `imm_data` is valid.
pub const IBV_WC_WITH_IMM: c_uint = 1 << 1;
/// `enum ibv_wc_flags`: IP checksum verified.
pub const IBV_WC_IP_CSUM_OK: c_uint = 1 << 2;
/// `enum ibv_wc_flags`: `invalidated_rkey` is valid.
pub const IBV_WC_WITH_INV: c_uint = 1 << 3;
/// `enum ibv_wc_flags`: tag matching sync request.
pub const IBV_WC_TM_SYNC_REQ: c_uint = 1 << 4;
/// `enum ibv_wc_flags`: tag matched.
pub const IBV_WC_TM_MATCH: c_uint = 1 << 5;
/// `enum ibv_wc_flags`: tag matching data valid.
pub const IBV_WC_TM_DATA_VALID: c_uint = 1 << 6;

/// The anonymous `imm_data` / `invalidated_rkey` union of `ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_wc_imm {
    /// Immediate data, network byte order (valid with `IBV_WC_WITH_IMM`).
    pub imm_data: __be32,
    /// Invalidated rkey (valid with `IBV_WC_WITH_INV`).
    pub invalidated_rkey: u32,
}

/// `struct ibv_wc`: one work completion as `poll_cq` writes it.
///
/// Only `wr_id`, `status`, `vendor_err` and `qp_num` are defined when `status` is not
/// success; `opcode` in particular is not.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    /// The work request's id.
    pub wr_id: u64,
    /// `enum ibv_wc_status` (`IBV_WC_*`).
    pub status: c_uint,
    /// `enum ibv_wc_opcode` (`IBV_WC_*`).
    pub opcode: c_uint,
    /// Vendor error syndrome.
    pub vendor_err: u32,
    /// Bytes transferred (receives, RDMA READ).
    pub byte_len: u32,
    /// Immediate data or invalidated rkey (C: anonymous union).
    pub imm: ibv_wc_imm,
    /// Local QP number.
    pub qp_num: u32,
    /// Source QP (UD).
    pub src_qp: u32,
    /// `enum ibv_wc_flags` bits.
    pub wc_flags: c_uint,
    /// P_Key index (GSI QPs).
    pub pkey_index: u16,
    /// Source LID (UD).
    pub slid: u16,
    /// Service level (UD).
    pub sl: u8,
    /// Destination LID path bits (UD).
    pub dlid_path_bits: u8,
}

impl core::fmt::Debug for ibv_wc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: both members of `imm` are `u32`s over the same 4 bytes.
        let imm = unsafe { self.imm.imm_data };
        f.debug_struct("ibv_wc")
            .field("wr_id", &self.wr_id)
            .field("status", &self.status)
            .field("opcode", &self.opcode)
            .field("vendor_err", &self.vendor_err)
            .field("byte_len", &self.byte_len)
            .field("imm", &imm)
            .field("qp_num", &self.qp_num)
            .field("src_qp", &self.src_qp)
            .field("wc_flags", &self.wc_flags)
            .field("pkey_index", &self.pkey_index)
            .field("slid", &self.slid)
            .field("sl", &self.sl)
            .field("dlid_path_bits", &self.dlid_path_bits)
            .finish()
    }
}

zeroed_default!(ibv_wc_imm, ibv_wc);
