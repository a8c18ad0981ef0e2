//! The public heads of the verbs objects: context, PD, MR, CQ, completion channel, SRQ,
//! address handle, memory window. Providers embed these at the start of their own larger
//! structs; only the fields below are ABI.

use core::ffi::{c_int, c_uint, c_void};

use libc::{pthread_cond_t, pthread_mutex_t};

use super::{ibv_context_ops, ibv_device, zeroed_default};

/// `struct ibv_context`: an opened device.
#[repr(C)]
pub struct ibv_context {
    /// The device this context was opened on.
    pub device: *mut ibv_device,
    /// The provider's operations; the data path calls through these.
    pub ops: ibv_context_ops,
    /// Command file descriptor.
    pub cmd_fd: c_int,
    /// Asynchronous event file descriptor.
    pub async_fd: c_int,
    /// Number of completion vectors.
    pub num_comp_vectors: c_int,
    /// Library-internal lock.
    pub mutex: pthread_mutex_t,
    /// `__VERBS_ABI_IS_EXTENDED` when a `verbs_context` precedes this struct.
    pub abi_compat: *mut c_void,
}

/// `struct ibv_pd`: a protection domain.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_pd {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Kernel handle.
    pub handle: u32,
}

/// `enum ibv_access_flags`: local write access.
pub const IBV_ACCESS_LOCAL_WRITE: c_uint = 1;
/// `enum ibv_access_flags`: remote RDMA WRITE access.
pub const IBV_ACCESS_REMOTE_WRITE: c_uint = 1 << 1;
/// `enum ibv_access_flags`: remote RDMA READ access.
pub const IBV_ACCESS_REMOTE_READ: c_uint = 1 << 2;
/// `enum ibv_access_flags`: remote atomic access.
pub const IBV_ACCESS_REMOTE_ATOMIC: c_uint = 1 << 3;
/// `enum ibv_access_flags`: memory window binding allowed.
pub const IBV_ACCESS_MW_BIND: c_uint = 1 << 4;
/// `enum ibv_access_flags`: zero-based addressing.
pub const IBV_ACCESS_ZERO_BASED: c_uint = 1 << 5;
/// `enum ibv_access_flags`: on-demand paging.
pub const IBV_ACCESS_ON_DEMAND: c_uint = 1 << 6;
/// `enum ibv_access_flags`: huge pages hint.
pub const IBV_ACCESS_HUGETLB: c_uint = 1 << 7;
/// First of the optional access flags (`IBV_ACCESS_OPTIONAL_FIRST`).
pub const IBV_ACCESS_OPTIONAL_FIRST: c_uint = 1 << 20;
/// `enum ibv_access_flags`: relaxed ordering (an optional flag).
pub const IBV_ACCESS_RELAXED_ORDERING: c_uint = IBV_ACCESS_OPTIONAL_FIRST;
/// Mask of the optional access flags (`IBV_ACCESS_OPTIONAL_RANGE`). The exported
/// `ibv_reg_mr` symbol does not accept them; verbs.h routes such calls to
/// `ibv_reg_mr_iova2` instead.
pub const IBV_ACCESS_OPTIONAL_RANGE: c_uint = 0x3ff0_0000;

/// `struct ibv_mr`: a registered memory region.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mr {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Protection domain it was registered in.
    pub pd: *mut ibv_pd,
    /// Start address.
    pub addr: *mut c_void,
    /// Length in bytes.
    pub length: usize,
    /// Kernel handle.
    pub handle: u32,
    /// Local key, for scatter/gather entries.
    pub lkey: u32,
    /// Remote key, for peers' RDMA operations.
    pub rkey: u32,
}

/// `struct ibv_comp_channel`: a file descriptor completion events arrive on.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_comp_channel {
    /// Owning context.
    pub context: *mut ibv_context,
    /// The event file descriptor.
    pub fd: c_int,
    /// Number of CQs using this channel.
    pub refcnt: c_int,
}

/// `struct ibv_cq`: a completion queue.
#[repr(C)]
pub struct ibv_cq {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Completion channel, or null.
    pub channel: *mut ibv_comp_channel,
    /// User context given at creation.
    pub cq_context: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// Number of entries.
    pub cqe: c_int,
    /// Library-internal lock.
    pub mutex: pthread_mutex_t,
    /// Library-internal condition.
    pub cond: pthread_cond_t,
    /// Completion events acknowledged so far.
    pub comp_events_completed: u32,
    /// Asynchronous events acknowledged so far.
    pub async_events_completed: u32,
}

/// `struct ibv_srq_attr`: an SRQ's sizes and limit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_srq_attr {
    /// Receive requests it holds at most.
    pub max_wr: u32,
    /// Scatter entries per receive request at most.
    pub max_sge: u32,
    /// The limit: `IBV_EVENT_SRQ_LIMIT_REACHED` when fewer receives remain (0: off).
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`: what `ibv_create_srq` takes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr {
    /// User context, returned in `ibv_srq.srq_context` and in events.
    pub srq_context: *mut c_void,
    /// Requested sizes (`srq_limit` is ignored at creation).
    pub attr: ibv_srq_attr,
}

impl Default for ibv_srq_init_attr {
    fn default() -> Self {
        ibv_srq_init_attr {
            srq_context: core::ptr::null_mut(),
            attr: ibv_srq_attr::default(),
        }
    }
}

/// `ibv_modify_srq` mask: change `max_wr` (resize).
pub const IBV_SRQ_MAX_WR: c_int = 1 << 0;
/// `ibv_modify_srq` mask: arm the limit.
pub const IBV_SRQ_LIMIT: c_int = 1 << 1;

/// `struct ibv_srq`: a shared receive queue.
#[repr(C)]
pub struct ibv_srq {
    /// Owning context.
    pub context: *mut ibv_context,
    /// User context.
    pub srq_context: *mut c_void,
    /// Protection domain.
    pub pd: *mut ibv_pd,
    /// Kernel handle.
    pub handle: u32,
    /// Library-internal lock.
    pub mutex: pthread_mutex_t,
    /// Library-internal condition.
    pub cond: pthread_cond_t,
    /// Events acknowledged so far.
    pub events_completed: u32,
}

/// `struct ibv_ah`: an address handle (for UD work requests).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_ah {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Protection domain.
    pub pd: *mut ibv_pd,
    /// Kernel handle.
    pub handle: u32,
}

/// `enum ibv_mw_type`: type 1 memory window.
pub const IBV_MW_TYPE_1: c_uint = 1;
/// `enum ibv_mw_type`: type 2 memory window.
pub const IBV_MW_TYPE_2: c_uint = 2;

/// `struct ibv_mw`: a memory window (referenced by the ops table and `ibv_send_wr`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mw {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Protection domain.
    pub pd: *mut ibv_pd,
    /// Remote key.
    pub rkey: u32,
    /// Kernel handle.
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub type_: c_uint,
}

zeroed_default!(
    ibv_context,
    ibv_pd,
    ibv_mr,
    ibv_comp_channel,
    ibv_cq,
    ibv_srq,
    ibv_ah,
    ibv_mw
);
