//! Rust enums for the library's enumerations.
//!
//! The C structs carry these as plain integers ([`crate::sys`]); a library or provider
//! newer than this crate may hand back values we have never heard of. `from_raw` maps
//! every integer to a variant, unknown ones to `Unknown(n)`, so no value read from the
//! library can panic or be misread. `as_raw` gives the integer back unchanged.

use core::fmt;

use crate::sys;

macro_rules! raw_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident : $raw:ty {
            $( $(#[$vmeta:meta])* $variant:ident = $value:path ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this crate does not know (from a newer library or a provider's
            /// private range), kept as is.
            Unknown($raw),
        }

        impl $name {
            /// Converts the library's integer; unknown values become `Unknown(n)`.
            #[inline]
            pub const fn from_raw(raw: $raw) -> Self {
                match raw {
                    $( $value => Self::$variant, )+
                    other => Self::Unknown(other),
                }
            }

            /// The library's integer for this value.
            #[inline]
            pub const fn as_raw(self) -> $raw {
                match self {
                    $( Self::$variant => $value, )+
                    Self::Unknown(raw) => raw,
                }
            }
        }

        impl From<$raw> for $name {
            #[inline]
            fn from(raw: $raw) -> Self {
                Self::from_raw(raw)
            }
        }
    };
}

raw_enum! {
    /// `enum ibv_wc_status`: how a work request ended.
    pub enum WcStatus: u32 {
        /// The operation completed successfully.
        Success = sys::IBV_WC_SUCCESS,
        /// Local length error.
        LocLenErr = sys::IBV_WC_LOC_LEN_ERR,
        /// Local QP operation error.
        LocQpOpErr = sys::IBV_WC_LOC_QP_OP_ERR,
        /// Local EE context operation error.
        LocEecOpErr = sys::IBV_WC_LOC_EEC_OP_ERR,
        /// Local protection error (bad lkey or bounds).
        LocProtErr = sys::IBV_WC_LOC_PROT_ERR,
        /// Flushed because the QP went to the error state.
        WrFlushErr = sys::IBV_WC_WR_FLUSH_ERR,
        /// Memory window bind error.
        MwBindErr = sys::IBV_WC_MW_BIND_ERR,
        /// Bad response.
        BadRespErr = sys::IBV_WC_BAD_RESP_ERR,
        /// Local access error.
        LocAccessErr = sys::IBV_WC_LOC_ACCESS_ERR,
        /// Remote invalid request.
        RemInvReqErr = sys::IBV_WC_REM_INV_REQ_ERR,
        /// Remote access error (bad rkey, bounds or rights).
        RemAccessErr = sys::IBV_WC_REM_ACCESS_ERR,
        /// Remote operation error.
        RemOpErr = sys::IBV_WC_REM_OP_ERR,
        /// Transport retry counter exceeded.
        RetryExcErr = sys::IBV_WC_RETRY_EXC_ERR,
        /// RNR retry counter exceeded.
        RnrRetryExcErr = sys::IBV_WC_RNR_RETRY_EXC_ERR,
        /// Local RDD violation.
        LocRddViolErr = sys::IBV_WC_LOC_RDD_VIOL_ERR,
        /// Remote invalid RD request.
        RemInvRdReqErr = sys::IBV_WC_REM_INV_RD_REQ_ERR,
        /// Remote abort.
        RemAbortErr = sys::IBV_WC_REM_ABORT_ERR,
        /// Invalid EE context number.
        InvEecnErr = sys::IBV_WC_INV_EECN_ERR,
        /// Invalid EE context state.
        InvEecStateErr = sys::IBV_WC_INV_EEC_STATE_ERR,
        /// Fatal error.
        FatalErr = sys::IBV_WC_FATAL_ERR,
        /// Response timeout.
        RespTimeoutErr = sys::IBV_WC_RESP_TIMEOUT_ERR,
        /// General error.
        GeneralErr = sys::IBV_WC_GENERAL_ERR,
        /// Tag matching error.
        TmErr = sys::IBV_WC_TM_ERR,
        /// Tag matching rendezvous incomplete.
        TmRndvIncomplete = sys::IBV_WC_TM_RNDV_INCOMPLETE,
    }
}

impl WcStatus {
    /// The text `ibv_wc_status_str` gives for this status, reproduced so that it needs no
    /// library call (and works for completions from any provider). Unknown values give
    /// `"unknown"`, as the library does.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::LocLenErr => "local length error",
            Self::LocQpOpErr => "local QP operation error",
            Self::LocEecOpErr => "local EE context operation error",
            Self::LocProtErr => "local protection error",
            Self::WrFlushErr => "Work Request Flushed Error",
            Self::MwBindErr => "memory management operation error",
            Self::BadRespErr => "bad response error",
            Self::LocAccessErr => "local access error",
            Self::RemInvReqErr => "remote invalid request error",
            Self::RemAccessErr => "remote access error",
            Self::RemOpErr => "remote operation error",
            Self::RetryExcErr => "transport retry counter exceeded",
            Self::RnrRetryExcErr => "RNR retry counter exceeded",
            Self::LocRddViolErr => "local RDD violation error",
            Self::RemInvRdReqErr => "remote invalid RD request",
            Self::RemAbortErr => "aborted error",
            Self::InvEecnErr => "invalid EE context number",
            Self::InvEecStateErr => "invalid EE context state",
            Self::FatalErr => "fatal error",
            Self::RespTimeoutErr => "response timeout error",
            Self::GeneralErr => "general error",
            Self::TmErr => "TM error",
            Self::TmRndvIncomplete => "TM software rendezvous",
            Self::Unknown(_) => "unknown",
        }
    }

    /// Whether this is [`WcStatus::Success`].
    #[inline]
    pub const fn is_success(self) -> bool {
        matches!(self, Self::Success)
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

raw_enum! {
    /// `enum ibv_wc_opcode`: what a *successful* completion was for. Undefined when the
    /// status is an error: route completions by QP and `wr_id`, never by opcode.
    pub enum WcOpcode: u32 {
        /// SEND.
        Send = sys::IBV_WC_SEND,
        /// RDMA WRITE (with or without immediate).
        RdmaWrite = sys::IBV_WC_RDMA_WRITE,
        /// RDMA READ.
        RdmaRead = sys::IBV_WC_RDMA_READ,
        /// Compare and swap.
        CompSwap = sys::IBV_WC_COMP_SWAP,
        /// Fetch and add.
        FetchAdd = sys::IBV_WC_FETCH_ADD,
        /// Memory window bind.
        BindMw = sys::IBV_WC_BIND_MW,
        /// Local invalidate.
        LocalInv = sys::IBV_WC_LOCAL_INV,
        /// TSO.
        Tso = sys::IBV_WC_TSO,
        /// Atomic write.
        AtomicWrite = sys::IBV_WC_ATOMIC_WRITE,
        /// A receive consumed by a SEND.
        Recv = sys::IBV_WC_RECV,
        /// A receive consumed by an RDMA WRITE with immediate.
        RecvRdmaWithImm = sys::IBV_WC_RECV_RDMA_WITH_IMM,
        /// Tag add.
        TmAdd = sys::IBV_WC_TM_ADD,
        /// Tag delete.
        TmDel = sys::IBV_WC_TM_DEL,
        /// Tag sync.
        TmSync = sys::IBV_WC_TM_SYNC,
        /// Tagged receive.
        TmRecv = sys::IBV_WC_TM_RECV,
        /// Tag not matched.
        TmNoTag = sys::IBV_WC_TM_NO_TAG,
        /// Driver-specific.
        Driver1 = sys::IBV_WC_DRIVER1,
        /// Driver-specific.
        Driver2 = sys::IBV_WC_DRIVER2,
        /// Driver-specific.
        Driver3 = sys::IBV_WC_DRIVER3,
    }
}

impl WcOpcode {
    /// Whether the completion belongs to the receive queue (`opcode & IBV_WC_RECV`).
    #[inline]
    pub const fn is_recv(self) -> bool {
        self.as_raw() & sys::IBV_WC_RECV != 0
    }
}

raw_enum! {
    /// `enum ibv_wr_opcode`: the operation of a send work request.
    pub enum WrOpcode: u32 {
        /// RDMA WRITE.
        RdmaWrite = sys::IBV_WR_RDMA_WRITE,
        /// RDMA WRITE with immediate (consumes a receive at the peer).
        RdmaWriteWithImm = sys::IBV_WR_RDMA_WRITE_WITH_IMM,
        /// SEND.
        Send = sys::IBV_WR_SEND,
        /// SEND with immediate.
        SendWithImm = sys::IBV_WR_SEND_WITH_IMM,
        /// RDMA READ.
        RdmaRead = sys::IBV_WR_RDMA_READ,
        /// Atomic compare and swap.
        AtomicCmpAndSwp = sys::IBV_WR_ATOMIC_CMP_AND_SWP,
        /// Atomic fetch and add.
        AtomicFetchAndAdd = sys::IBV_WR_ATOMIC_FETCH_AND_ADD,
        /// Local invalidate.
        LocalInv = sys::IBV_WR_LOCAL_INV,
        /// Bind memory window.
        BindMw = sys::IBV_WR_BIND_MW,
        /// SEND with invalidate.
        SendWithInv = sys::IBV_WR_SEND_WITH_INV,
        /// TSO.
        Tso = sys::IBV_WR_TSO,
        /// Driver-specific.
        Driver1 = sys::IBV_WR_DRIVER1,
        /// Atomic write.
        AtomicWrite = sys::IBV_WR_ATOMIC_WRITE,
    }
}

raw_enum! {
    /// `enum ibv_qp_state`.
    pub enum QpState: u32 {
        /// Reset: just created, or reset.
        Reset = sys::IBV_QPS_RESET,
        /// Initialized: receives may be posted.
        Init = sys::IBV_QPS_INIT,
        /// Ready to receive.
        Rtr = sys::IBV_QPS_RTR,
        /// Ready to send.
        Rts = sys::IBV_QPS_RTS,
        /// Send queue drained.
        Sqd = sys::IBV_QPS_SQD,
        /// Send queue error.
        Sqe = sys::IBV_QPS_SQE,
        /// Error: outstanding work requests are flushed.
        Err = sys::IBV_QPS_ERR,
        /// The library's "unknown" state.
        StateUnknown = sys::IBV_QPS_UNKNOWN,
    }
}

raw_enum! {
    /// `enum ibv_qp_type`.
    pub enum QpType: u32 {
        /// Reliable connected.
        Rc = sys::IBV_QPT_RC,
        /// Unreliable connected.
        Uc = sys::IBV_QPT_UC,
        /// Unreliable datagram.
        Ud = sys::IBV_QPT_UD,
        /// Raw packet.
        RawPacket = sys::IBV_QPT_RAW_PACKET,
        /// XRC send.
        XrcSend = sys::IBV_QPT_XRC_SEND,
        /// XRC receive.
        XrcRecv = sys::IBV_QPT_XRC_RECV,
        /// Driver-specific.
        Driver = sys::IBV_QPT_DRIVER,
    }
}

raw_enum! {
    /// `enum ibv_mtu`: a path MTU.
    pub enum Mtu: u32 {
        /// 256 bytes.
        Mtu256 = sys::IBV_MTU_256,
        /// 512 bytes.
        Mtu512 = sys::IBV_MTU_512,
        /// 1024 bytes.
        Mtu1024 = sys::IBV_MTU_1024,
        /// 2048 bytes.
        Mtu2048 = sys::IBV_MTU_2048,
        /// 4096 bytes.
        Mtu4096 = sys::IBV_MTU_4096,
    }
}

impl Mtu {
    /// The MTU in bytes; `None` for an unknown value.
    pub const fn bytes(self) -> Option<u32> {
        match self {
            Self::Mtu256 => Some(256),
            Self::Mtu512 => Some(512),
            Self::Mtu1024 => Some(1024),
            Self::Mtu2048 => Some(2048),
            Self::Mtu4096 => Some(4096),
            Self::Unknown(_) => None,
        }
    }

    /// The smaller of two MTUs. An unknown value loses to a known one (it cannot be
    /// trusted to be usable); two unknown values give `self`.
    pub const fn min(self, other: Mtu) -> Mtu {
        match (self.bytes(), other.bytes()) {
            (Some(a), Some(b)) => {
                if a <= b {
                    self
                } else {
                    other
                }
            }
            (Some(_), None) => self,
            (None, Some(_)) => other,
            (None, None) => self,
        }
    }
}

raw_enum! {
    /// `enum ibv_port_state`.
    pub enum PortState: u32 {
        /// No state change.
        Nop = sys::IBV_PORT_NOP,
        /// Down.
        Down = sys::IBV_PORT_DOWN,
        /// Initializing.
        Init = sys::IBV_PORT_INIT,
        /// Armed.
        Armed = sys::IBV_PORT_ARMED,
        /// Active: ready for traffic.
        Active = sys::IBV_PORT_ACTIVE,
        /// Active, deferred.
        ActiveDefer = sys::IBV_PORT_ACTIVE_DEFER,
    }
}

raw_enum! {
    /// A port's link layer (`IBV_LINK_LAYER_*`).
    pub enum LinkLayer: u8 {
        /// Unspecified: older kernels report this for InfiniBand.
        Unspecified = sys::IBV_LINK_LAYER_UNSPECIFIED,
        /// InfiniBand.
        InfiniBand = sys::IBV_LINK_LAYER_INFINIBAND,
        /// Ethernet (RoCE): addressing needs a GRH.
        Ethernet = sys::IBV_LINK_LAYER_ETHERNET,
    }
}

raw_enum! {
    /// `enum ibv_atomic_cap`.
    pub enum AtomicCap: u32 {
        /// No atomic operations.
        None = sys::IBV_ATOMIC_NONE,
        /// Atomic with respect to this HCA only.
        Hca = sys::IBV_ATOMIC_HCA,
        /// Atomic with respect to the whole system.
        Glob = sys::IBV_ATOMIC_GLOB,
    }
}

raw_enum! {
    /// `enum ibv_node_type`.
    pub enum NodeType: i32 {
        /// The library's "unknown".
        NodeUnknown = sys::IBV_NODE_UNKNOWN,
        /// Channel adapter.
        Ca = sys::IBV_NODE_CA,
        /// Switch.
        Switch = sys::IBV_NODE_SWITCH,
        /// Router.
        Router = sys::IBV_NODE_ROUTER,
        /// iWARP RNIC.
        Rnic = sys::IBV_NODE_RNIC,
        /// usNIC.
        Usnic = sys::IBV_NODE_USNIC,
        /// usNIC over UDP.
        UsnicUdp = sys::IBV_NODE_USNIC_UDP,
        /// Unspecified.
        Unspecified = sys::IBV_NODE_UNSPECIFIED,
    }
}

raw_enum! {
    /// `enum ibv_transport_type`.
    pub enum TransportType: i32 {
        /// The library's "unknown".
        TransportUnknown = sys::IBV_TRANSPORT_UNKNOWN,
        /// InfiniBand (also RoCE).
        Ib = sys::IBV_TRANSPORT_IB,
        /// iWARP.
        Iwarp = sys::IBV_TRANSPORT_IWARP,
        /// usNIC.
        Usnic = sys::IBV_TRANSPORT_USNIC,
        /// usNIC over UDP.
        UsnicUdp = sys::IBV_TRANSPORT_USNIC_UDP,
        /// Unspecified.
        Unspecified = sys::IBV_TRANSPORT_UNSPECIFIED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_round_trip() {
        assert_eq!(WcStatus::from_raw(999), WcStatus::Unknown(999));
        assert_eq!(WcStatus::Unknown(999).as_raw(), 999);
        assert_eq!(WcStatus::Unknown(999).as_str(), "unknown");
        assert_eq!(WcOpcode::from_raw(0x1234), WcOpcode::Unknown(0x1234));
        assert_eq!(QpState::from_raw(42), QpState::Unknown(42));
        assert_eq!(Mtu::from_raw(0), Mtu::Unknown(0));
        assert_eq!(LinkLayer::from_raw(9), LinkLayer::Unknown(9));
        assert_eq!(NodeType::from_raw(-7), NodeType::Unknown(-7));
    }

    #[test]
    fn known_values_round_trip() {
        for raw in 0..=sys::IBV_WC_TM_RNDV_INCOMPLETE {
            let s = WcStatus::from_raw(raw);
            assert!(!matches!(s, WcStatus::Unknown(_)), "{raw}");
            assert_eq!(s.as_raw(), raw);
        }
        for raw in 0..=sys::IBV_QPS_UNKNOWN {
            assert_eq!(QpState::from_raw(raw).as_raw(), raw);
        }
        assert_eq!(
            WcOpcode::from_raw(sys::IBV_WC_RECV_RDMA_WITH_IMM),
            WcOpcode::RecvRdmaWithImm
        );
        assert!(WcOpcode::RecvRdmaWithImm.is_recv());
        assert!(!WcOpcode::RdmaWrite.is_recv());
    }

    #[test]
    fn mtu_min_and_bytes() {
        assert_eq!(Mtu::Mtu4096.min(Mtu::Mtu1024), Mtu::Mtu1024);
        assert_eq!(Mtu::Mtu1024.min(Mtu::Mtu4096), Mtu::Mtu1024);
        assert_eq!(Mtu::Unknown(77).min(Mtu::Mtu2048), Mtu::Mtu2048);
        assert_eq!(Mtu::Mtu256.bytes(), Some(256));
        assert_eq!(Mtu::Unknown(6).bytes(), None);
    }
}
