//! The structs and constants C sees: handles, settings, work requests, completions.
//! Numeric codes (opcodes, flags, statuses) are libibverbs' values, as in vqp-core.

/// Data QPs per endpoint at most: the capacities of the one instantiation C sees
/// (see the crate docs for why).
pub const VQP_MAX_DATA_QPS: u32 = 8;
/// Send WQEs tracked per data QP at most (`max_outstanding` ≤ this).
pub const VQP_MAX_WQES: u32 = 128;
/// Virtual requests in flight per direction at most.
pub const VQP_MAX_SLOTS: u32 = 512;
/// The DQPLB reorder window, in sequence numbers.
pub const VQP_WINDOW: u32 = 1024;
/// Devices one endpoint's data QPs may span at most.
pub const VQP_MAX_DEVICES: u32 = 4;
/// Physical completions the virtual CQ polls at a time.
pub const VQP_POLL_BATCH: u32 = 32;

// The header's numbers (literals, so the generator can write them) are vqp-core's.
const _: () = {
    assert!(VQP_MAX_DATA_QPS as usize == vqp_core::caps::DATA_QPS);
    assert!(VQP_MAX_WQES as usize == vqp_core::caps::WQES);
    assert!(VQP_MAX_SLOTS as usize == vqp_core::caps::SLOTS);
    assert!(VQP_WINDOW as usize == vqp_core::caps::WINDOW);
    assert!(VQP_MAX_DEVICES as usize == vqp_core::MAX_DEVICES);
    assert!(VQP_POLL_BATCH as usize == vqp_core::caps::BATCH);
};
/// The longest endpoint card, in bytes (a buffer this long always holds a card).
pub const VQP_CARD_MAX: u32 = 1024;

/// `vqp_settings.mode`: every fragment a WRITE_WITH_IMM carrying a sequence number;
/// no room for the user's immediate.
pub const VQP_MODE_DQPLB: u32 = 0;
/// `vqp_settings.mode`: plain writes plus one notify write carrying the user's
/// immediate; for adaptive-routing fabrics.
pub const VQP_MODE_SPRAY: u32 = 1;

/// `vqp_settings.policy`: round-robin over the data QPs with room.
pub const VQP_POLICY_ROUND_ROBIN: u32 = 0;
/// `vqp_settings.policy`: weighted by each device's speed (or `weights`).
pub const VQP_POLICY_WEIGHTED: u32 = 1;
/// `vqp_settings.policy`: the data QP with the fewest outstanding bytes.
pub const VQP_POLICY_LEAST_OUTSTANDING: u32 = 2;
/// `vqp_settings.policy`: weights following each QP's measured service rate.
pub const VQP_POLICY_ADAPTIVE: u32 = 3;

/// `vqp_settings.signaling`: only the last WQE of each per-QP chain is signaled.
pub const VQP_SIGNAL_LAST_OF_CHAIN: u32 = 0;
/// `vqp_settings.signaling`: every WQE is signaled.
pub const VQP_SIGNAL_EVERY: u32 = 1;

/// Opcode: one-sided write (`IBV_WR_RDMA_WRITE`).
pub const VQP_WR_RDMA_WRITE: u32 = 0;
/// Opcode: write that also consumes a receive at the peer.
pub const VQP_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
/// Opcode: two-sided send.
pub const VQP_WR_SEND: u32 = 2;
/// Opcode: two-sided send with an immediate.
pub const VQP_WR_SEND_WITH_IMM: u32 = 3;
/// Opcode: one-sided read.
pub const VQP_WR_RDMA_READ: u32 = 4;
/// Opcode: 64-bit compare and swap.
pub const VQP_WR_ATOMIC_CMP_AND_SWP: u32 = 5;
/// Opcode: 64-bit fetch and add.
pub const VQP_WR_ATOMIC_FETCH_AND_ADD: u32 = 6;

/// Send flag: fence (`IBV_SEND_FENCE`).
pub const VQP_SEND_FENCE: u32 = 1;
/// Send flag: ask for a completion (`IBV_SEND_SIGNALED`).
pub const VQP_SEND_SIGNALED: u32 = 2;
/// Send flag: solicited event (`IBV_SEND_SOLICITED`).
pub const VQP_SEND_SOLICITED: u32 = 4;
/// Send flag: inline payload; only through `vqp_post_send_inline`.
pub const VQP_SEND_INLINE: u32 = 8;

/// Access flag: local write (`IBV_ACCESS_LOCAL_WRITE`).
pub const VQP_ACCESS_LOCAL_WRITE: u32 = 1;
/// Access flag: remote write.
pub const VQP_ACCESS_REMOTE_WRITE: u32 = 2;
/// Access flag: remote read.
pub const VQP_ACCESS_REMOTE_READ: u32 = 4;
/// Access flag: remote atomics.
pub const VQP_ACCESS_REMOTE_ATOMIC: u32 = 8;

/// `vqp_wc.flags`: `imm_data` holds the immediate.
pub const VQP_WC_WITH_IMM: u32 = 1;

/// Completion status: success (`IBV_WC_SUCCESS`); other values are libibverbs'
/// `ibv_wc_status`, and 0x1000 (a peer's protocol error) and 0x1001 (a post the
/// provider refused) are vqp's own.
pub const VQP_WC_SUCCESS: u32 = 0;

/// An open RDMA device and a protection domain on it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_device {
    /// Opaque; 0 is no device.
    pub handle: u64,
}

/// Memory registered on a device.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_mr {
    /// Opaque; 0 is no region.
    pub handle: u64,
}

/// One side of a virtual QP: created, then connected to a peer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_endpoint {
    /// Opaque; 0 is no endpoint.
    pub handle: u64,
}

/// What `vqp_endpoint_create` builds. Fill it with `vqp_settings_init`, then change
/// fields: `struct_size` lets a later library refuse a struct of another layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct vqp_settings {
    /// `sizeof(vqp_settings)`, set by `vqp_settings_init`.
    pub struct_size: u32,
    /// `VQP_MODE_DQPLB` or `VQP_MODE_SPRAY`.
    pub mode: u32,
    /// Data QPs, 1 to `VQP_MAX_DATA_QPS` (default 4).
    pub data_qps: u32,
    /// One of `VQP_POLICY_*` (default round-robin).
    pub policy: u32,
    /// Largest fragment in bytes (default 65536).
    pub max_frag: u32,
    /// Fragment boundaries on multiples of this (a power of two; 1: none).
    pub align: u32,
    /// Requests of at most this many bytes go whole to one QP (default 0).
    pub no_split_below: u32,
    /// Send WQEs in flight per data QP, 1 to `VQP_MAX_WQES` (default 64).
    pub max_outstanding: u32,
    /// Receives kept posted per receiving QP (default 64).
    pub recv_depth: u32,
    /// `VQP_SIGNAL_LAST_OF_CHAIN` (default) or `VQP_SIGNAL_EVERY`.
    pub signaling: u32,
    /// Relative weight per device under the weighted policies (default 1 each).
    pub weights: [u32; 4],
    /// Under `VQP_POLICY_WEIGHTED`, weigh devices by their ports' speed (default 1).
    pub weights_from_ports: u8,
    /// Survive a data QP's failure by posting its fragments on the others (default 0).
    pub redispatch: u8,
    /// Require the peer to speak fail-back (default 0).
    pub fail_back: u8,
    /// Local port, from 1 (default 1).
    pub port: u8,
    /// GID index to address the peer by; -1 (default): by LID on InfiniBand; on
    /// Ethernet (RoCE), the port's first RoCE v2 GID holding an IPv4 address, else its
    /// first RoCE v2 GID, else 0.
    pub gid_index: i32,
    /// The most data QPs one request uses (0, the default: all).
    pub fanout: u32,
    /// Completion queue entries to ask for at least (default 0: what is needed).
    pub min_cq_entries: u32,
    /// With `redispatch`, how long to hold requests once every data QP failed, in
    /// nanoseconds of the clock given to `vqp_endpoint_sample` (default 0).
    pub grace_ns: u64,
}

/// The keys of one buffer pair on one device.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_keys {
    /// The local buffer's key on this device (its `vqp_mr`'s lkey).
    pub lkey: u32,
    /// The remote buffer's key on the peer's device of the same index.
    pub rkey: u32,
}

/// A virtual send request.
///
/// The local range is one contiguous buffer (`local_addr`, `len`), named on each
/// device by `keys[d].lkey`: a virtual QP cuts it into fragments itself, so it takes
/// no scatter/gather list. `key_mask` says which entries of `keys` are set (bit `d`
/// for device `d`); a request needs the keys of every device its QPs use.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_send_wr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// One of `VQP_WR_*`.
    pub opcode: u32,
    /// `VQP_SEND_*` bits; `VQP_SEND_SIGNALED` asks for a completion.
    pub flags: u32,
    /// The local buffer's address.
    pub local_addr: u64,
    /// Bytes to move (up to 2^64 − 1 for fragmented writes and reads).
    pub len: u64,
    /// The remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Immediate, network byte order (WITH_IMM opcodes).
    pub imm_data: u32,
    /// Bit `d` set: `keys[d]` is given.
    pub key_mask: u32,
    /// Keys per device.
    pub keys: [vqp_keys; 4],
    /// Compare operand (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap operand (CMP_AND_SWP).
    pub swap: u64,
}

/// A virtual receive request: `len == 0` is a notification receive (completes when
/// a whole WRITE_WITH_IMM message has landed); `len > 0` a data receive for a SEND.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_recv_wr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The buffer (data receive).
    pub addr: u64,
    /// Its length; 0 for a notification receive.
    pub len: u32,
    /// Its key on data QP 0's device.
    pub lkey: u32,
}

/// A virtual completion: one per request, in posting order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_wc {
    /// The request's `wr_id`.
    pub wr_id: u64,
    /// The whole request's length in bytes.
    pub byte_len: u64,
    /// `VQP_WC_SUCCESS` or the first error (libibverbs' `ibv_wc_status`).
    pub status: u32,
    /// libibverbs' `ibv_wc_opcode`.
    pub opcode: u32,
    /// The virtual QP's number.
    pub qp_num: u32,
    /// The immediate (network byte order) when `flags & VQP_WC_WITH_IMM`.
    pub imm_data: u32,
    /// `VQP_WC_*` bits.
    pub flags: u32,
    /// Zero.
    pub reserved: u32,
}

/// A memory region's address, length and keys.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_mr_info {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// What one data QP of a connected endpoint did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_qp_stats {
    /// Send WQEs posted.
    pub wqes: u64,
    /// Bytes handed to it (kept under policies that read it, and with re-dispatch).
    pub bytes: u64,
    /// Chains posted (doorbells).
    pub chains: u64,
    /// Send completions it returned.
    pub cqes: u64,
    /// Receives it consumed.
    pub recvs: u64,
    /// Its QP number.
    pub qp_num: u32,
    /// The device it is on.
    pub device: u32,
    /// 1 when it has failed.
    pub failed: u32,
    /// Zero.
    pub reserved: u32,
}
