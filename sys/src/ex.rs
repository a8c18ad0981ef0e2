//! The extended verbs: `struct verbs_context` (the operations a provider adds in front of
//! its `ibv_context`), and the structs of the `_ex` verbs that verbs.h's inline wrappers
//! reach through it: device attributes, extended CQs and QPs, thread and parent
//! domains, device memory.

use core::ffi::{c_int, c_uint, c_void};

use libc::{pthread_cond_t, pthread_mutex_t, timespec};

use super::{
    __be32, ibv_ah, ibv_comp_channel, ibv_context, ibv_cq, ibv_device_attr, ibv_mr, ibv_mw,
    ibv_mw_bind_info, ibv_pd, ibv_port_attr, ibv_qp, ibv_qp_cap, ibv_sge, ibv_srq, zeroed_default,
};

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` value of a context that has a
/// [`verbs_context`] in front of it.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// An operation slot of [`verbs_context`] this crate does not type (flows, counters,
/// work queues, XRC, …): its size and place only.
pub type verbs_op = Option<unsafe extern "C" fn()>;

/// `struct verbs_context`: the extended operations, laid out *before* the
/// `ibv_context` they extend ("grows up": new fields are added at the front). `sz` is
/// the size of the whole struct; verbs.h's `verbs_get_ctx_op` finds an operation only
/// when `sz` covers it and it is not null.
#[repr(C)]
pub struct verbs_context {
    /// `query_port` with the caller's `sizeof(struct ibv_port_attr)`.
    pub query_port:
        Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int>,
    /// `advise_mr` (`ibv_advise_mr`): pd, `enum ibv_advise_mr_advice`, flags, the
    /// ranges and their count.
    pub advise_mr: Option<unsafe extern "C" fn(*mut ibv_pd, u32, u32, *mut ibv_sge, u32) -> c_int>,
    /// `alloc_null_mr`.
    pub alloc_null_mr: verbs_op,
    /// `read_counters`.
    pub read_counters: verbs_op,
    /// `attach_counters_point_flow`.
    pub attach_counters_point_flow: verbs_op,
    /// `create_counters`.
    pub create_counters: verbs_op,
    /// `destroy_counters`.
    pub destroy_counters: verbs_op,
    /// `ibv_reg_dm_mr`.
    pub reg_dm_mr:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, usize, c_uint) -> *mut ibv_mr>,
    /// `ibv_alloc_dm`.
    pub alloc_dm:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm>,
    /// `ibv_free_dm`.
    pub free_dm: Option<unsafe extern "C" fn(*mut ibv_dm) -> c_int>,
    /// `modify_flow_action_esp`.
    pub modify_flow_action_esp: verbs_op,
    /// `destroy_flow_action`.
    pub destroy_flow_action: verbs_op,
    /// `create_flow_action_esp`.
    pub create_flow_action_esp: verbs_op,
    /// `modify_qp_rate_limit`.
    pub modify_qp_rate_limit: verbs_op,
    /// `ibv_alloc_parent_domain`.
    pub alloc_parent_domain: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd,
    >,
    /// `ibv_dealloc_td`.
    pub dealloc_td: Option<unsafe extern "C" fn(*mut ibv_td) -> c_int>,
    /// `ibv_alloc_td`.
    pub alloc_td:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td>,
    /// `modify_cq`.
    pub modify_cq: verbs_op,
    /// `post_srq_ops`.
    pub post_srq_ops: verbs_op,
    /// `destroy_rwq_ind_table`.
    pub destroy_rwq_ind_table: verbs_op,
    /// `create_rwq_ind_table`.
    pub create_rwq_ind_table: verbs_op,
    /// `destroy_wq`.
    pub destroy_wq: verbs_op,
    /// `modify_wq`.
    pub modify_wq: verbs_op,
    /// `create_wq`.
    pub create_wq: verbs_op,
    /// `ibv_query_rt_values_ex`.
    pub query_rt_values:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int>,
    /// `ibv_create_cq_ex`.
    pub create_cq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
    /// libibverbs' private data (`struct verbs_ex_private *`).
    pub priv_: *mut c_void,
    /// `ibv_query_device_ex` with the caller's `sizeof(struct ibv_device_attr_ex)`.
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *const ibv_query_device_ex_input,
            *mut ibv_device_attr_ex,
            usize,
        ) -> c_int,
    >,
    /// `ibv_destroy_flow`.
    pub ibv_destroy_flow: verbs_op,
    /// `ABI_placeholder2`.
    pub abi_placeholder2: verbs_op,
    /// `ibv_create_flow`.
    pub ibv_create_flow: verbs_op,
    /// `ABI_placeholder1`.
    pub abi_placeholder1: verbs_op,
    /// `open_qp`.
    pub open_qp: verbs_op,
    /// `ibv_create_qp_ex`.
    pub create_qp_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    /// `get_srq_num`.
    pub get_srq_num: verbs_op,
    /// `create_srq_ex`.
    pub create_srq_ex: verbs_op,
    /// `open_xrcd`.
    pub open_xrcd: verbs_op,
    /// `close_xrcd`.
    pub close_xrcd: verbs_op,
    /// `_ABI_placeholder3`.
    pub abi_placeholder3: u64,
    /// `sizeof(struct verbs_context)`, immediately before `context`.
    pub sz: usize,
    /// The context the application holds; the last field.
    pub context: ibv_context,
}

/// `struct ibv_odp_caps::per_transport_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_odp_caps_per_transport {
    /// RC operations with on-demand paging.
    pub rc_odp_caps: u32,
    /// UC operations with on-demand paging.
    pub uc_odp_caps: u32,
    /// UD operations with on-demand paging.
    pub ud_odp_caps: u32,
}

/// `struct ibv_odp_caps`: on-demand paging.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_odp_caps {
    /// `enum ibv_odp_general_caps`.
    pub general_caps: u64,
    /// Per transport, `enum ibv_odp_transport_cap_bits`.
    pub per_transport_caps: ibv_odp_caps_per_transport,
}

/// `struct ibv_tso_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_tso_caps {
    /// Largest TSO payload.
    pub max_tso: u32,
    /// QP types with TSO (bit per `ibv_qp_type`).
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_rss_caps {
    /// QP types with RSS.
    pub supported_qpts: u32,
    /// Indirection tables.
    pub max_rwq_indirection_tables: u32,
    /// Entries per indirection table.
    pub max_rwq_indirection_table_size: u32,
    /// `enum ibv_rx_hash_fields`.
    pub rx_hash_fields_mask: u64,
    /// `enum ibv_rx_hash_function_flags`.
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_packet_pacing_caps {
    /// Lowest rate limit, kbps.
    pub qp_rate_limit_min: u32,
    /// Highest rate limit, kbps.
    pub qp_rate_limit_max: u32,
    /// QP types with pacing.
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps`: tag matching.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_tm_caps {
    /// Largest rendezvous header.
    pub max_rndv_hdr_size: u32,
    /// Tags in a matching list.
    pub max_num_tags: u32,
    /// `enum ibv_tm_cap_flags`.
    pub flags: u32,
    /// Outstanding list operations.
    pub max_ops: u32,
    /// SGEs of a tagged buffer.
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_cq_moderation_caps {
    /// Largest completion count.
    pub max_cq_count: u16,
    /// Longest period, microseconds.
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_pci_atomic_caps {
    /// Operand sizes of PCI fetch-and-add.
    pub fetch_add: u16,
    /// Operand sizes of PCI swap.
    pub swap: u16,
    /// Operand sizes of PCI compare-and-swap.
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex`: `ibv_query_device_ex`'s answer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    /// What `ibv_query_device` reports.
    pub orig_attr: ibv_device_attr,
    /// Compatibility mask.
    pub comp_mask: u32,
    /// On-demand paging.
    pub odp_caps: ibv_odp_caps,
    /// Bits of the completion timestamp counter that are valid.
    pub completion_timestamp_mask: u64,
    /// Frequency of the completion timestamp counter, kHz.
    pub hca_core_clock: u64,
    /// Extended capability flags (`IBV_DEVICE_*` above bit 31 included).
    pub device_cap_flags_ex: u64,
    /// TCP segmentation offload.
    pub tso_caps: ibv_tso_caps,
    /// Receive-side scaling.
    pub rss_caps: ibv_rss_caps,
    /// Receive work queues.
    pub max_wq_type_rq: u32,
    /// Packet pacing.
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    /// `enum ibv_raw_packet_caps`.
    pub raw_packet_caps: u32,
    /// Tag matching.
    pub tm_caps: ibv_tm_caps,
    /// CQ moderation.
    pub cq_mod_caps: ibv_cq_moderation_caps,
    /// Largest device memory allocation, bytes.
    pub max_dm_size: u64,
    /// PCI atomics.
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    /// XRC operations with on-demand paging.
    pub xrc_odp_caps: u32,
    /// Ports, beyond `orig_attr.phys_port_cnt`'s 255.
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_query_device_ex_input {
    /// Must be 0.
    pub comp_mask: u32,
}

/// `struct ibv_values_ex`: `ibv_query_rt_values_ex`'s answer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_values_ex {
    /// In: the values wanted (`IBV_VALUES_MASK_*`); out: those given.
    pub comp_mask: u32,
    /// The completion timestamp counter, as a `timespec`.
    pub raw_clock: timespec,
}

/// `enum ibv_values_mask`: `raw_clock`.
pub const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1;

/// `struct ibv_cq_init_attr_ex`: `ibv_create_cq_ex`'s argument.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    /// Entries wanted.
    pub cqe: u32,
    /// Returned with completion events.
    pub cq_context: *mut c_void,
    /// Completion channel, or null.
    pub channel: *mut ibv_comp_channel,
    /// Completion vector.
    pub comp_vector: u32,
    /// `IBV_WC_EX_WITH_*`: what the `read_*` functions may be asked.
    pub wc_flags: u64,
    /// `IBV_CQ_INIT_ATTR_MASK_*`.
    pub comp_mask: u32,
    /// `IBV_CREATE_CQ_ATTR_*` (with `IBV_CQ_INIT_ATTR_MASK_FLAGS`).
    pub flags: u32,
    /// A parent domain (with `IBV_CQ_INIT_ATTR_MASK_PD`).
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_poll_cq_attr {
    /// Must be 0.
    pub comp_mask: u32,
}

/// `struct ibv_wc_tm_info` (tag matching; never filled here).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_wc_tm_info {
    /// Tag.
    pub tag: u64,
    /// Private data.
    pub priv_: u32,
}

/// A `read_*` function of [`ibv_cq_ex`].
pub type cq_ex_read<T> = Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> T>;

/// `struct ibv_cq_ex`: an extended CQ. Its head is `struct ibv_cq` (`ibv_cq_ex_to_cq`
/// is a cast); `status` and `wr_id` hold the current completion between
/// `start_poll` and `end_poll`.
#[repr(C)]
pub struct ibv_cq_ex {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Completion channel, or null.
    pub channel: *mut ibv_comp_channel,
    /// User context.
    pub cq_context: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// Entries.
    pub cqe: c_int,
    /// Library-internal lock.
    pub mutex: pthread_mutex_t,
    /// Library-internal condition.
    pub cond: pthread_cond_t,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Asynchronous events acknowledged.
    pub async_events_completed: u32,
    /// Compatibility mask.
    pub comp_mask: u32,
    /// The current completion's status.
    pub status: u32,
    /// The current completion's `wr_id`.
    pub wr_id: u64,
    /// Starts a poll: 0 with a completion current, `ENOENT` with none.
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    /// The next completion: 0, or `ENOENT`.
    pub next_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    /// Ends a poll started with 0.
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    /// `ibv_wc_read_opcode`.
    pub read_opcode: cq_ex_read<u32>,
    /// `ibv_wc_read_vendor_err`.
    pub read_vendor_err: cq_ex_read<u32>,
    /// `ibv_wc_read_byte_len`.
    pub read_byte_len: cq_ex_read<u32>,
    /// `ibv_wc_read_imm_data`.
    pub read_imm_data: cq_ex_read<__be32>,
    /// `ibv_wc_read_qp_num`.
    pub read_qp_num: cq_ex_read<u32>,
    /// `ibv_wc_read_src_qp`.
    pub read_src_qp: cq_ex_read<u32>,
    /// `ibv_wc_read_wc_flags`.
    pub read_wc_flags: cq_ex_read<c_uint>,
    /// `ibv_wc_read_slid`.
    pub read_slid: cq_ex_read<u32>,
    /// `ibv_wc_read_sl`.
    pub read_sl: cq_ex_read<u8>,
    /// `ibv_wc_read_dlid_path_bits`.
    pub read_dlid_path_bits: cq_ex_read<u8>,
    /// `ibv_wc_read_completion_ts`.
    pub read_completion_ts: cq_ex_read<u64>,
    /// `ibv_wc_read_cvlan`.
    pub read_cvlan: cq_ex_read<u16>,
    /// `ibv_wc_read_flow_tag`.
    pub read_flow_tag: cq_ex_read<u32>,
    /// `ibv_wc_read_tm_info`.
    pub read_tm_info: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_wc_tm_info)>,
    /// `ibv_wc_read_completion_wallclock_ns`.
    pub read_completion_wallclock_ns: cq_ex_read<u64>,
}

/// `IBV_WC_EX_WITH_BYTE_LEN`.
pub const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1;
/// `IBV_WC_EX_WITH_IMM`.
pub const IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
/// `IBV_WC_EX_WITH_QP_NUM`.
pub const IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
/// `IBV_WC_EX_WITH_SRC_QP`.
pub const IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
/// `IBV_WC_EX_WITH_SLID`.
pub const IBV_WC_EX_WITH_SLID: u64 = 1 << 4;
/// `IBV_WC_EX_WITH_SL`.
pub const IBV_WC_EX_WITH_SL: u64 = 1 << 5;
/// `IBV_WC_EX_WITH_DLID_PATH_BITS`.
pub const IBV_WC_EX_WITH_DLID_PATH_BITS: u64 = 1 << 6;
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`.
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
/// `IBV_WC_EX_WITH_CVLAN`.
pub const IBV_WC_EX_WITH_CVLAN: u64 = 1 << 8;
/// `IBV_WC_EX_WITH_FLOW_TAG`.
pub const IBV_WC_EX_WITH_FLOW_TAG: u64 = 1 << 9;
/// `IBV_WC_EX_WITH_TM_INFO`.
pub const IBV_WC_EX_WITH_TM_INFO: u64 = 1 << 10;
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`.
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
/// `IBV_WC_STANDARD_FLAGS`: byte length, immediate, QP number, source QP, SLID, SL,
/// DLID path bits.
pub const IBV_WC_STANDARD_FLAGS: u64 = 0x7f;

/// `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1;
/// `IBV_CQ_INIT_ATTR_MASK_PD`.
pub const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`.
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1;
/// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`.
pub const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_rx_hash_conf {
    /// `enum ibv_rx_hash_function_flags`.
    pub rx_hash_function: u8,
    /// Key length.
    pub rx_hash_key_len: u8,
    /// Key.
    pub rx_hash_key: *mut u8,
    /// `enum ibv_rx_hash_fields`.
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`: `ibv_create_qp_ex`'s argument.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    /// User context.
    pub qp_context: *mut c_void,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// Shared receive queue, or null.
    pub srq: *mut ibv_srq,
    /// Capacities (updated with what was granted).
    pub cap: ibv_qp_cap,
    /// `IBV_QPT_*`.
    pub qp_type: u32,
    /// Whether every send is signaled.
    pub sq_sig_all: c_int,
    /// `IBV_QP_INIT_ATTR_*`: which of the fields below are valid.
    pub comp_mask: u32,
    /// Protection domain (or parent domain).
    pub pd: *mut ibv_pd,
    /// XRC domain.
    pub xrcd: *mut c_void,
    /// `IBV_QP_CREATE_*`.
    pub create_flags: u32,
    /// TSO header size.
    pub max_tso_header: u16,
    /// Indirection table.
    pub rwq_ind_tbl: *mut c_void,
    /// RSS hash.
    pub rx_hash_conf: ibv_rx_hash_conf,
    /// Source QP number.
    pub source_qpn: u32,
    /// `IBV_QP_EX_WITH_*`: the `ibv_wr_*` operations the QP will post.
    pub send_ops_flags: u64,
}

/// `IBV_QP_INIT_ATTR_PD`.
pub const IBV_QP_INIT_ATTR_PD: u32 = 1;
/// `IBV_QP_INIT_ATTR_XRCD`.
pub const IBV_QP_INIT_ATTR_XRCD: u32 = 1 << 1;
/// `IBV_QP_INIT_ATTR_CREATE_FLAGS`.
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
/// `IBV_QP_INIT_ATTR_MAX_TSO_HEADER`.
pub const IBV_QP_INIT_ATTR_MAX_TSO_HEADER: u32 = 1 << 3;
/// `IBV_QP_INIT_ATTR_IND_TABLE`.
pub const IBV_QP_INIT_ATTR_IND_TABLE: u32 = 1 << 4;
/// `IBV_QP_INIT_ATTR_RX_HASH`.
pub const IBV_QP_INIT_ATTR_RX_HASH: u32 = 1 << 5;
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

/// `IBV_QP_EX_WITH_RDMA_WRITE`.
pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1;
/// `IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM`.
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
/// `IBV_QP_EX_WITH_SEND`.
pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
/// `IBV_QP_EX_WITH_SEND_WITH_IMM`.
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
/// `IBV_QP_EX_WITH_RDMA_READ`.
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
/// `IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP`.
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
/// `IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD`.
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
/// `IBV_QP_EX_WITH_LOCAL_INV`.
pub const IBV_QP_EX_WITH_LOCAL_INV: u64 = 1 << 7;
/// `IBV_QP_EX_WITH_BIND_MW`.
pub const IBV_QP_EX_WITH_BIND_MW: u64 = 1 << 8;
/// `IBV_QP_EX_WITH_SEND_WITH_INV`.
pub const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;
/// `IBV_QP_EX_WITH_TSO`.
pub const IBV_QP_EX_WITH_TSO: u64 = 1 << 10;
/// `IBV_QP_EX_WITH_ATOMIC_WRITE`.
pub const IBV_QP_EX_WITH_ATOMIC_WRITE: u64 = 1 << 12;

/// `struct ibv_data_buf`: one piece of `ibv_wr_set_inline_data_list`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_data_buf {
    /// Start.
    pub addr: *mut c_void,
    /// Length in bytes.
    pub length: usize,
}

/// `struct ibv_qp_ex`: a QP with the `ibv_wr_*` posting functions. Its head is the
/// `ibv_qp`; `wr_id` and `wr_flags` are read when an operation starts a work request.
#[repr(C)]
pub struct ibv_qp_ex {
    /// The QP.
    pub qp_base: ibv_qp,
    /// Compatibility mask.
    pub comp_mask: u64,
    /// `wr_id` of the next work request.
    pub wr_id: u64,
    /// `IBV_SEND_*` of the next work request.
    pub wr_flags: c_uint,
    /// `ibv_wr_atomic_cmp_swp`.
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    /// `ibv_wr_atomic_fetch_add`.
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    /// `ibv_wr_bind_mw`.
    pub wr_bind_mw:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
    /// `ibv_wr_local_inv`.
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// `ibv_wr_rdma_read`.
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    /// `ibv_wr_rdma_write`.
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    /// `ibv_wr_rdma_write_imm`.
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, __be32)>,
    /// `ibv_wr_send`.
    pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// `ibv_wr_send_imm`.
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, __be32)>,
    /// `ibv_wr_send_inv`.
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// `ibv_wr_send_tso`.
    pub wr_send_tso: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u16, u16)>,
    /// `ibv_wr_set_ud_addr`.
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    /// `ibv_wr_set_xrc_srqn`.
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// `ibv_wr_set_inline_data`.
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
    /// `ibv_wr_set_inline_data_list`.
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
    /// `ibv_wr_set_sge`.
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    /// `ibv_wr_set_sge_list`.
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
    /// `ibv_wr_start`.
    pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// `ibv_wr_complete`: 0, or an errno with nothing posted.
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    /// `ibv_wr_abort`.
    pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// `ibv_wr_atomic_write`.
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
}

/// `struct ibv_td_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_td_init_attr {
    /// Must be 0.
    pub comp_mask: u32,
}

/// `struct ibv_td`: a thread domain.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_td {
    /// Owning context.
    pub context: *mut ibv_context,
}

/// `struct ibv_parent_domain_init_attr`: `ibv_alloc_parent_domain`'s argument.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_parent_domain_init_attr {
    /// The protection domain (not null).
    pub pd: *mut ibv_pd,
    /// A thread domain, or null.
    pub td: *mut ibv_td,
    /// `IBV_PARENT_DOMAIN_INIT_ATTR_*`.
    pub comp_mask: u32,
    /// Custom allocator.
    pub alloc:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void>,
    /// Custom free.
    pub free: Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64)>,
    /// Handed to the allocators.
    pub pd_context: *mut c_void,
}

/// `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`.
pub const IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: u32 = 1;
/// `IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT`.
pub const IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT: u32 = 1 << 1;

/// `struct ibv_dm`: device memory. The two copies are called through it (verbs.h's
/// inline `ibv_memcpy_to_dm` / `ibv_memcpy_from_dm`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_dm {
    /// Owning context.
    pub context: *mut ibv_context,
    /// `ibv_memcpy_to_dm`.
    pub memcpy_to_dm: Option<unsafe extern "C" fn(*mut ibv_dm, u64, *const c_void, usize) -> c_int>,
    /// `ibv_memcpy_from_dm`.
    pub memcpy_from_dm: Option<unsafe extern "C" fn(*mut c_void, *mut ibv_dm, u64, usize) -> c_int>,
    /// Compatibility mask.
    pub comp_mask: u32,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_alloc_dm_attr`: `ibv_alloc_dm`'s argument.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_alloc_dm_attr {
    /// Bytes.
    pub length: usize,
    /// log2 of the alignment required.
    pub log_align_req: u32,
    /// Must be 0.
    pub comp_mask: u32,
}

zeroed_default!(
    verbs_context,
    ibv_device_attr_ex,
    ibv_values_ex,
    ibv_cq_init_attr_ex,
    ibv_cq_ex,
    ibv_rx_hash_conf,
    ibv_qp_init_attr_ex,
    ibv_qp_ex,
    ibv_td,
    ibv_parent_domain_init_attr,
    ibv_dm,
);
