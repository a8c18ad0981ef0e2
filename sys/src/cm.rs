//! The structs and constants of rdma-core's `rdma_cma.h` and `infiniband/sa.h`, laid out
//! as C lays them out: what librdmacm's callers (vqp-rdmacm, which implements it, and
//! vqp-host, which loads it) share. Checked against the system header in vqp-rdmacm's
//! `tests/abi.rs` where `librdmacm-dev` is installed.
#![allow(non_camel_case_types, missing_docs)]

use core::ffi::{c_int, c_uint, c_void};

use crate::{ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_srq};

/// `enum rdma_cm_event_type`.
pub mod event {
    use core::ffi::c_uint;
    pub const ADDR_RESOLVED: c_uint = 0;
    pub const ADDR_ERROR: c_uint = 1;
    pub const ROUTE_RESOLVED: c_uint = 2;
    pub const ROUTE_ERROR: c_uint = 3;
    pub const CONNECT_REQUEST: c_uint = 4;
    pub const CONNECT_RESPONSE: c_uint = 5;
    pub const CONNECT_ERROR: c_uint = 6;
    pub const UNREACHABLE: c_uint = 7;
    pub const REJECTED: c_uint = 8;
    pub const ESTABLISHED: c_uint = 9;
    pub const DISCONNECTED: c_uint = 10;
    pub const DEVICE_REMOVAL: c_uint = 11;
    pub const MULTICAST_JOIN: c_uint = 12;
    pub const MULTICAST_ERROR: c_uint = 13;
    pub const ADDR_CHANGE: c_uint = 14;
    pub const TIMEWAIT_EXIT: c_uint = 15;
    pub const ADDRINFO_RESOLVED: c_uint = 16;
    pub const ADDRINFO_ERROR: c_uint = 17;
    pub const USER: c_uint = 18;
    pub const INTERNAL: c_uint = 19;
}

/// `enum rdma_port_space`.
pub const RDMA_PS_IPOIB: c_uint = 0x0002;
pub const RDMA_PS_TCP: c_uint = 0x0106;
pub const RDMA_PS_UDP: c_uint = 0x0111;
pub const RDMA_PS_IB: c_uint = 0x013F;

/// The Q_Key of RDMA_PS_UDP ids.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

pub const RAI_PASSIVE: c_int = 1;
pub const RAI_NUMERICHOST: c_int = 2;
pub const RAI_NOROUTE: c_int = 4;
pub const RAI_FAMILY: c_int = 8;

pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src: libc::sockaddr_storage,
    pub dst: libc::sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_sa_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: c_uint,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
    pub arg: u64,
}

#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_uint,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: libc::socklen_t,
    pub ai_dst_len: libc::socklen_t,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut libc::c_char,
    pub ai_dst_canonname: *mut libc::c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

// Sizes as gcc lays out rdma-core's headers on x86_64 (librdmacm-dev 44).
const _: () = assert!(core::mem::size_of::<ibv_sa_path_rec>() == 64);
const _: () = assert!(core::mem::size_of::<rdma_addr>() == 296);
const _: () = assert!(core::mem::size_of::<rdma_cm_id>() == 416);
const _: () = assert!(core::mem::size_of::<rdma_cm_event>() == 80);
const _: () = assert!(core::mem::size_of::<rdma_addrinfo>() == 96);
