//! Queue pairs: the object head, creation and modify attributes, address vectors.

use core::ffi::{c_int, c_uint, c_void};

use libc::{pthread_cond_t, pthread_mutex_t};

use super::{ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_srq, zeroed_default};

/// `enum ibv_qp_type`: reliable connected.
pub const IBV_QPT_RC: c_uint = 2;
/// `enum ibv_qp_type`: unreliable connected.
pub const IBV_QPT_UC: c_uint = 3;
/// `enum ibv_qp_type`: unreliable datagram.
pub const IBV_QPT_UD: c_uint = 4;
/// `enum ibv_qp_type`: raw packet.
pub const IBV_QPT_RAW_PACKET: c_uint = 8;
/// `enum ibv_qp_type`: XRC send.
pub const IBV_QPT_XRC_SEND: c_uint = 9;
/// `enum ibv_qp_type`: XRC receive.
pub const IBV_QPT_XRC_RECV: c_uint = 10;
/// `enum ibv_qp_type`: driver-specific.
pub const IBV_QPT_DRIVER: c_uint = 0xff;

/// `enum ibv_qp_state`: reset.
pub const IBV_QPS_RESET: c_uint = 0;
/// `enum ibv_qp_state`: initialized.
pub const IBV_QPS_INIT: c_uint = 1;
/// `enum ibv_qp_state`: ready to receive.
pub const IBV_QPS_RTR: c_uint = 2;
/// `enum ibv_qp_state`: ready to send.
pub const IBV_QPS_RTS: c_uint = 3;
/// `enum ibv_qp_state`: send queue drained.
pub const IBV_QPS_SQD: c_uint = 4;
/// `enum ibv_qp_state`: send queue error.
pub const IBV_QPS_SQE: c_uint = 5;
/// `enum ibv_qp_state`: error.
pub const IBV_QPS_ERR: c_uint = 6;
/// `enum ibv_qp_state`: unknown.
pub const IBV_QPS_UNKNOWN: c_uint = 7;

/// `enum ibv_mig_state`: migrated.
pub const IBV_MIG_MIGRATED: c_uint = 0;
/// `enum ibv_mig_state`: rearm.
pub const IBV_MIG_REARM: c_uint = 1;
/// `enum ibv_mig_state`: armed.
pub const IBV_MIG_ARMED: c_uint = 2;

/// `enum ibv_qp_attr_mask`: `qp_state`.
pub const IBV_QP_STATE: c_uint = 1;
/// `enum ibv_qp_attr_mask`: `cur_qp_state`.
pub const IBV_QP_CUR_STATE: c_uint = 1 << 1;
/// `enum ibv_qp_attr_mask`: `en_sqd_async_notify`.
pub const IBV_QP_EN_SQD_ASYNC_NOTIFY: c_uint = 1 << 2;
/// `enum ibv_qp_attr_mask`: `qp_access_flags`.
pub const IBV_QP_ACCESS_FLAGS: c_uint = 1 << 3;
/// `enum ibv_qp_attr_mask`: `pkey_index`.
pub const IBV_QP_PKEY_INDEX: c_uint = 1 << 4;
/// `enum ibv_qp_attr_mask`: `port_num`.
pub const IBV_QP_PORT: c_uint = 1 << 5;
/// `enum ibv_qp_attr_mask`: `qkey`.
pub const IBV_QP_QKEY: c_uint = 1 << 6;
/// `enum ibv_qp_attr_mask`: `ah_attr` (the address vector).
pub const IBV_QP_AV: c_uint = 1 << 7;
/// `enum ibv_qp_attr_mask`: `path_mtu`.
pub const IBV_QP_PATH_MTU: c_uint = 1 << 8;
/// `enum ibv_qp_attr_mask`: `timeout`.
pub const IBV_QP_TIMEOUT: c_uint = 1 << 9;
/// `enum ibv_qp_attr_mask`: `retry_cnt`.
pub const IBV_QP_RETRY_CNT: c_uint = 1 << 10;
/// `enum ibv_qp_attr_mask`: `rnr_retry`.
pub const IBV_QP_RNR_RETRY: c_uint = 1 << 11;
/// `enum ibv_qp_attr_mask`: `rq_psn`.
pub const IBV_QP_RQ_PSN: c_uint = 1 << 12;
/// `enum ibv_qp_attr_mask`: `max_rd_atomic`.
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_uint = 1 << 13;
/// `enum ibv_qp_attr_mask`: `alt_*` path.
pub const IBV_QP_ALT_PATH: c_uint = 1 << 14;
/// `enum ibv_qp_attr_mask`: `min_rnr_timer`.
pub const IBV_QP_MIN_RNR_TIMER: c_uint = 1 << 15;
/// `enum ibv_qp_attr_mask`: `sq_psn`.
pub const IBV_QP_SQ_PSN: c_uint = 1 << 16;
/// `enum ibv_qp_attr_mask`: `max_dest_rd_atomic`.
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_uint = 1 << 17;
/// `enum ibv_qp_attr_mask`: `path_mig_state`.
pub const IBV_QP_PATH_MIG_STATE: c_uint = 1 << 18;
/// `enum ibv_qp_attr_mask`: `cap`.
pub const IBV_QP_CAP: c_uint = 1 << 19;
/// `enum ibv_qp_attr_mask`: `dest_qp_num`.
pub const IBV_QP_DEST_QPN: c_uint = 1 << 20;
/// `enum ibv_qp_attr_mask`: `rate_limit`.
pub const IBV_QP_RATE_LIMIT: c_uint = 1 << 25;

/// `struct ibv_qp`: a queue pair.
#[repr(C)]
pub struct ibv_qp {
    /// Owning context.
    pub context: *mut ibv_context,
    /// User context given at creation.
    pub qp_context: *mut c_void,
    /// Protection domain.
    pub pd: *mut ibv_pd,
    /// Send completion queue.
    pub send_cq: *mut ibv_cq,
    /// Receive completion queue.
    pub recv_cq: *mut ibv_cq,
    /// Shared receive queue, or null.
    pub srq: *mut ibv_srq,
    /// Kernel handle.
    pub handle: u32,
    /// QP number.
    pub qp_num: u32,
    /// `enum ibv_qp_state`, as last set through `ibv_modify_qp`.
    pub state: c_uint,
    /// `enum ibv_qp_type`.
    pub qp_type: c_uint,
    /// Library-internal lock.
    pub mutex: pthread_mutex_t,
    /// Library-internal condition.
    pub cond: pthread_cond_t,
    /// Events acknowledged so far.
    pub events_completed: u32,
}

/// `struct ibv_qp_cap`: queue sizes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_qp_cap {
    /// Outstanding send work requests.
    pub max_send_wr: u32,
    /// Outstanding receive work requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Largest inline payload, bytes.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`: argument of `ibv_create_qp`; `cap` is written back with
/// the sizes actually granted.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_init_attr {
    /// User context stored in the QP.
    pub qp_context: *mut c_void,
    /// Send completion queue.
    pub send_cq: *mut ibv_cq,
    /// Receive completion queue.
    pub recv_cq: *mut ibv_cq,
    /// Shared receive queue, or null.
    pub srq: *mut ibv_srq,
    /// Requested (and granted) sizes.
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: c_uint,
    /// Non-zero: every send work request generates a completion.
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route`: the GRH part of an address vector.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_global_route {
    /// Destination GID.
    pub dgid: ibv_gid,
    /// Flow label.
    pub flow_label: u32,
    /// Index of the source GID in the local port's table.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`: an address vector.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_ah_attr {
    /// Global route (used when `is_global` is 1).
    pub grh: ibv_global_route,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// `enum ibv_rate`; 0 is the port's maximum.
    pub static_rate: u8,
    /// 1 when `grh` is valid (required on RoCE).
    pub is_global: u8,
    /// Local port number.
    pub port_num: u8,
}

/// `struct ibv_qp_attr`: argument of `ibv_modify_qp` / result of `ibv_query_qp`. Which
/// fields count is told by a separate `IBV_QP_*` mask.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state`: the state to move to.
    pub qp_state: c_uint,
    /// `enum ibv_qp_state`: the assumed current state.
    pub cur_qp_state: c_uint,
    /// `enum ibv_mtu`.
    pub path_mtu: c_uint,
    /// `enum ibv_mig_state`.
    pub path_mig_state: c_uint,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Destination QP number.
    pub dest_qp_num: u32,
    /// `enum ibv_access_flags` bits for remote access.
    pub qp_access_flags: c_uint,
    /// Queue sizes.
    pub cap: ibv_qp_cap,
    /// Primary path address vector.
    pub ah_attr: ibv_ah_attr,
    /// Alternate path address vector.
    pub alt_ah_attr: ibv_ah_attr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// Notify when the SQ is drained.
    pub en_sqd_async_notify: u8,
    /// SQ draining (query only).
    pub sq_draining: u8,
    /// Outstanding RDMA READ/atomic as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ/atomic as responder.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer (encoded).
    pub min_rnr_timer: u8,
    /// Local port.
    pub port_num: u8,
    /// Local ACK timeout (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retry count.
    pub retry_cnt: u8,
    /// RNR retry count (7 = infinite).
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// Rate limit, kbps.
    pub rate_limit: u32,
}

zeroed_default!(
    ibv_qp,
    ibv_qp_init_attr,
    ibv_global_route,
    ibv_ah_attr,
    ibv_qp_attr
);
