//! libibverbs' text for enumerations: completion statuses, port states, node types,
//! asynchronous event types and work request opcodes.

use core::ffi::{c_char, c_int, c_uint, CStr};

use vqp_sys::*;

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

/// `ibv_event_type_str`: libibverbs' text for an asynchronous event type (`"unknown"`
/// past the last one).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_event_type_str(event: c_uint) -> *const c_char {
    const S: [&CStr; 21] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
        c"Device link speed change",
    ];
    S.get(event as usize)
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

/// `ibv_wr_opcode_str` (rdma-core private ABI): libibverbs' text for a work request
/// opcode (`"unknown"` for a value that names none).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_wr_opcode_str(opcode: c_uint) -> *const c_char {
    match opcode {
        0 => c"rdma-write",
        1 => c"rdma-write-with-imm",
        2 => c"send",
        3 => c"send-with-imm",
        4 => c"rdma-read",
        5 => c"atomic-cmp-and-swp",
        6 => c"atomic-fetch-and-add",
        7 => c"local-inv",
        8 => c"bind-mw",
        9 => c"send-with-inv",
        10 => c"tso",
        11 => c"driver1",
        14 => c"flush",
        15 => c"atomic-write",
        _ => c"unknown",
    }
    .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: the functions return static NUL-terminated strings.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn event_names_follow_the_enum() {
        assert_eq!(s(ibv_event_type_str(0)), "CQ error");
        assert_eq!(s(ibv_event_type_str(9)), "port active");
        assert_eq!(s(ibv_event_type_str(10)), "port error");
        assert_eq!(s(ibv_event_type_str(20)), "Device link speed change");
        assert_eq!(s(ibv_event_type_str(21)), "unknown");
        assert_eq!(s(ibv_event_type_str(u32::MAX)), "unknown");
        assert_eq!(s(ibv_wr_opcode_str(0)), "rdma-write");
        assert_eq!(s(ibv_wr_opcode_str(4)), "rdma-read");
        assert_eq!(s(ibv_wr_opcode_str(15)), "atomic-write");
        assert_eq!(s(ibv_wr_opcode_str(12)), "unknown");
    }
}
