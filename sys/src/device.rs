//! Devices, device and port attributes, GIDs.

use core::ffi::{c_char, c_int, c_uint};

use super::{__be64, ibv_context, zeroed_default};

/// Length of `ibv_device::name` and `ibv_device::dev_name`.
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// Length of `ibv_device::dev_path` and `ibv_device::ibdev_path`.
pub const IBV_SYSFS_PATH_MAX: usize = 256;

/// Obsolete provider hooks at the start of `ibv_device`; never called.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct _ibv_device_ops {
    /// Unused.
    pub _dummy1:
        Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int) -> *mut ibv_context>,
    /// Unused.
    pub _dummy2: Option<unsafe extern "C" fn(context: *mut ibv_context)>,
}

/// `struct ibv_device`: one RDMA device as listed by `ibv_get_device_list`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_device {
    /// Obsolete, unused.
    pub _ops: _ibv_device_ops,
    /// `enum ibv_node_type` (`IBV_NODE_*`).
    pub node_type: c_int,
    /// `enum ibv_transport_type` (`IBV_TRANSPORT_*`).
    pub transport_type: c_int,
    /// Kernel device name, e.g. `mlx5_0`; NUL-terminated.
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    /// uverbs device name, e.g. `uverbs0`; NUL-terminated.
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// sysfs path of the uverbs class device.
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// sysfs path of the infiniband class device.
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `enum ibv_node_type`: unknown.
pub const IBV_NODE_UNKNOWN: c_int = -1;
/// `enum ibv_node_type`: channel adapter.
pub const IBV_NODE_CA: c_int = 1;
/// `enum ibv_node_type`: switch.
pub const IBV_NODE_SWITCH: c_int = 2;
/// `enum ibv_node_type`: router.
pub const IBV_NODE_ROUTER: c_int = 3;
/// `enum ibv_node_type`: iWARP RNIC.
pub const IBV_NODE_RNIC: c_int = 4;
/// `enum ibv_node_type`: usNIC.
pub const IBV_NODE_USNIC: c_int = 5;
/// `enum ibv_node_type`: usNIC over UDP.
pub const IBV_NODE_USNIC_UDP: c_int = 6;
/// `enum ibv_node_type`: unspecified.
pub const IBV_NODE_UNSPECIFIED: c_int = 7;

/// `enum ibv_transport_type`: unknown.
pub const IBV_TRANSPORT_UNKNOWN: c_int = -1;
/// `enum ibv_transport_type`: InfiniBand (also RoCE).
pub const IBV_TRANSPORT_IB: c_int = 0;
/// `enum ibv_transport_type`: iWARP.
pub const IBV_TRANSPORT_IWARP: c_int = 1;
/// `enum ibv_transport_type`: usNIC.
pub const IBV_TRANSPORT_USNIC: c_int = 2;
/// `enum ibv_transport_type`: usNIC over UDP.
pub const IBV_TRANSPORT_USNIC_UDP: c_int = 3;
/// `enum ibv_transport_type`: unspecified.
pub const IBV_TRANSPORT_UNSPECIFIED: c_int = 4;

/// `enum ibv_atomic_cap`: no atomics.
pub const IBV_ATOMIC_NONE: c_uint = 0;
/// `enum ibv_atomic_cap`: atomic within this HCA.
pub const IBV_ATOMIC_HCA: c_uint = 1;
/// `enum ibv_atomic_cap`: atomic across the whole system.
pub const IBV_ATOMIC_GLOB: c_uint = 2;

/// `struct ibv_device_attr`, filled by `ibv_query_device`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_device_attr {
    /// Firmware version, NUL-terminated.
    pub fw_ver: [c_char; 64],
    /// Node GUID, network byte order.
    pub node_guid: __be64,
    /// System image GUID, network byte order.
    pub sys_image_guid: __be64,
    /// Largest registrable memory region, bytes.
    pub max_mr_size: u64,
    /// Supported page sizes (bit mask).
    pub page_size_cap: u64,
    /// IEEE vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Maximum number of QPs.
    pub max_qp: c_int,
    /// Maximum outstanding work requests per queue.
    pub max_qp_wr: c_int,
    /// `enum ibv_device_cap_flags` bits.
    pub device_cap_flags: c_uint,
    /// Maximum scatter/gather entries per work request.
    pub max_sge: c_int,
    /// Maximum scatter/gather entries per RDMA READ.
    pub max_sge_rd: c_int,
    /// Maximum number of CQs.
    pub max_cq: c_int,
    /// Maximum entries per CQ.
    pub max_cqe: c_int,
    /// Maximum number of MRs.
    pub max_mr: c_int,
    /// Maximum number of PDs.
    pub max_pd: c_int,
    /// Maximum outstanding RDMA READ/atomic per QP as responder.
    pub max_qp_rd_atom: c_int,
    /// Same, per EE context.
    pub max_ee_rd_atom: c_int,
    /// Maximum responder resources for RDMA READ/atomic in total.
    pub max_res_rd_atom: c_int,
    /// Maximum outstanding RDMA READ/atomic per QP as initiator.
    pub max_qp_init_rd_atom: c_int,
    /// Same, per EE context.
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: c_uint,
    /// Maximum EE contexts.
    pub max_ee: c_int,
    /// Maximum RD domains.
    pub max_rdd: c_int,
    /// Maximum memory windows.
    pub max_mw: c_int,
    /// Maximum raw IPv6 QPs.
    pub max_raw_ipv6_qp: c_int,
    /// Maximum raw Ethertype QPs.
    pub max_raw_ethy_qp: c_int,
    /// Maximum multicast groups.
    pub max_mcast_grp: c_int,
    /// Maximum QPs per multicast group.
    pub max_mcast_qp_attach: c_int,
    /// Maximum QPs attached to multicast groups in total.
    pub max_total_mcast_qp_attach: c_int,
    /// Maximum address handles.
    pub max_ah: c_int,
    /// Maximum FMRs.
    pub max_fmr: c_int,
    /// Maximum remaps per FMR.
    pub max_map_per_fmr: c_int,
    /// Maximum SRQs.
    pub max_srq: c_int,
    /// Maximum work requests per SRQ.
    pub max_srq_wr: c_int,
    /// Maximum scatter/gather entries per SRQ work request.
    pub max_srq_sge: c_int,
    /// Number of partition keys.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

/// `enum ibv_mtu`: 256 bytes.
pub const IBV_MTU_256: c_uint = 1;
/// `enum ibv_mtu`: 512 bytes.
pub const IBV_MTU_512: c_uint = 2;
/// `enum ibv_mtu`: 1024 bytes.
pub const IBV_MTU_1024: c_uint = 3;
/// `enum ibv_mtu`: 2048 bytes.
pub const IBV_MTU_2048: c_uint = 4;
/// `enum ibv_mtu`: 4096 bytes.
pub const IBV_MTU_4096: c_uint = 5;

/// `enum ibv_port_state`: no state change.
pub const IBV_PORT_NOP: c_uint = 0;
/// `enum ibv_port_state`: down.
pub const IBV_PORT_DOWN: c_uint = 1;
/// `enum ibv_port_state`: initializing.
pub const IBV_PORT_INIT: c_uint = 2;
/// `enum ibv_port_state`: armed.
pub const IBV_PORT_ARMED: c_uint = 3;
/// `enum ibv_port_state`: active.
pub const IBV_PORT_ACTIVE: c_uint = 4;
/// `enum ibv_port_state`: active, deferred.
pub const IBV_PORT_ACTIVE_DEFER: c_uint = 5;

/// `ibv_port_attr::link_layer`: unspecified (treated as InfiniBand by rdma-core).
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
/// `ibv_port_attr::link_layer`: InfiniBand.
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
/// `ibv_port_attr::link_layer`: Ethernet (RoCE).
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// Bytes of `ibv_port_attr` as rdma-core v44 defines it (the newest field is
/// `port_cap_flags2`).
pub const IBV_PORT_ATTR_V44_SIZE: usize = 52;

/// `struct ibv_port_attr`, filled by `ibv_query_port`.
///
/// rdma-core grows this struct: v44 ends with `port_cap_flags2` (52 bytes); later
/// releases append `uint32_t active_speed_ex` (56 bytes), and the exported
/// `ibv_query_port` writes the whole struct *as the loaded library knows it*. A binding
/// that copied an older, smaller layout and passed a stack buffer of that size gets its
/// stack overwritten by a newer library. So the fields known to the v44 header are
/// followed by [`reserved`](Self::reserved) tail space: 64 bytes in all, room for every
/// known layout plus headroom. Zero the whole struct before a query (as verbs.h's inline
/// wrapper does); bytes a library does not know stay zero. The first reserved word is
/// where newer libraries put `active_speed_ex`: see
/// [`active_speed_ex`](Self::active_speed_ex).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_port_attr {
    /// `enum ibv_port_state` (`IBV_PORT_*`).
    pub state: c_uint,
    /// `enum ibv_mtu`: largest MTU the port supports.
    pub max_mtu: c_uint,
    /// `enum ibv_mtu`: MTU in use.
    pub active_mtu: c_uint,
    /// GID table length.
    pub gid_tbl_len: c_int,
    /// `enum ibv_port_cap_flags` bits.
    pub port_cap_flags: u32,
    /// Largest message size.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// Base LID of the port.
    pub lid: u16,
    /// LID of the subnet manager.
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Maximum virtual lanes.
    pub max_vl_num: u8,
    /// Service level of the subnet manager.
    pub sm_sl: u8,
    /// Subnet propagation delay.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Active link width.
    pub active_width: u8,
    /// Active link speed.
    pub active_speed: u8,
    /// Physical port state.
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    /// Port flags.
    pub flags: u8,
    /// `enum ibv_port_cap_flags2` bits.
    pub port_cap_flags2: u16,
    /// Tail space for fields newer libraries append (see the type's docs). Zero it.
    pub reserved: [u32; 3],
}

impl ibv_port_attr {
    /// `active_speed_ex` as newer libraries (after v44) write it right after
    /// `port_cap_flags2`; 0 when the library does not know the field (provided the
    /// struct was zeroed before the query).
    #[inline]
    pub fn active_speed_ex(&self) -> u32 {
        self.reserved[0]
    }
}

/// The `global` view of [`ibv_gid`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_gid_global {
    /// Subnet prefix, network byte order.
    pub subnet_prefix: __be64,
    /// Interface id, network byte order.
    pub interface_id: __be64,
}

/// `union ibv_gid`: a 128-bit global identifier.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    /// The 16 bytes, network order.
    pub raw: [u8; 16],
    /// Prefix and interface id.
    pub global: ibv_gid_global,
}

impl core::fmt::Debug for ibv_gid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: both members cover the same 16 bytes and any bit pattern is a valid
        // `[u8; 16]`.
        let raw = unsafe { self.raw };
        f.debug_struct("ibv_gid").field("raw", &raw).finish()
    }
}

zeroed_default!(ibv_device, ibv_device_attr, ibv_port_attr, ibv_gid);

static_assertions::const_assert!(core::mem::size_of::<ibv_port_attr>() >= 56);
static_assertions::const_assert_eq!(
    core::mem::offset_of!(ibv_port_attr, reserved),
    IBV_PORT_ATTR_V44_SIZE
);

/// `struct _compat_ibv_port_attr`: the incomplete type the exported `ibv_query_port`
/// symbol is declared with. The library writes an [`ibv_port_attr`] through it.
#[repr(C)]
pub struct _compat_ibv_port_attr {
    _opaque: [u8; 0],
}
