//! libibverbs' text for enumerations: completion statuses, port states, node types.

use core::ffi::{c_char, c_int, c_uint, CStr};

use vqp_host::sys::*;

/// `ibv_wc_status_str`: libibverbs' text for a completion status.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_wc_status_str(status: c_uint) -> *const c_char {
    const S: [&CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    S.get(status as usize)
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

/// `ibv_port_state_str`: libibverbs' text for a port state.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_port_state_str(port_state: c_uint) -> *const c_char {
    const S: [&CStr; 6] = [
        c"PORT_NOP",
        c"PORT_DOWN",
        c"PORT_INIT",
        c"PORT_ARMED",
        c"PORT_ACTIVE",
        c"PORT_ACTIVE_DEFER",
    ];
    S.get(port_state as usize)
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

/// `ibv_node_type_str`: libibverbs' text for a node type.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    match node_type {
        IBV_NODE_CA => c"InfiniBand channel adapter",
        IBV_NODE_SWITCH => c"InfiniBand switch",
        IBV_NODE_ROUTER => c"InfiniBand router",
        IBV_NODE_RNIC => c"iWARP NIC",
        _ => c"unknown",
    }
    .as_ptr()
}
