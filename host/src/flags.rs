//! Bit-set newtypes for the library's flag words.
//!
//! Each wraps the `u32` the C API takes, with named constants, `|`, `&`, `contains` and
//! `bits`. Bits this crate does not name survive `from_bits` / `bits` unchanged.

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign};

use crate::sys;

macro_rules! flag_set {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* const $flag:ident = $value:expr; )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            $( $(#[$fmeta])* pub const $flag: Self = Self($value); )+

            /// No bits set.
            pub const EMPTY: Self = Self(0);

            /// Wraps a raw bit word.
            #[inline]
            pub const fn from_bits(bits: u32) -> Self {
                Self(bits)
            }

            /// The raw bit word.
            #[inline]
            pub const fn bits(self) -> u32 {
                self.0
            }

            /// Whether every bit of `other` is set in `self`.
            #[inline]
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }

            /// Whether no bit is set.
            #[inline]
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }

            /// The union of both sets (usable in `const`).
            #[inline]
            pub const fn union(self, other: Self) -> Self {
                Self(self.0 | other.0)
            }
        }

        impl BitOr for $name {
            type Output = Self;
            #[inline]
            fn bitor(self, rhs: Self) -> Self {
                Self(self.0 | rhs.0)
            }
        }

        impl BitOrAssign for $name {
            #[inline]
            fn bitor_assign(&mut self, rhs: Self) {
                self.0 |= rhs.0;
            }
        }

        impl BitAnd for $name {
            type Output = Self;
            #[inline]
            fn bitand(self, rhs: Self) -> Self {
                Self(self.0 & rhs.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut rest = self.0;
                write!(f, "{}(", stringify!($name))?;
                let mut first = true;
                $(
                    if $value != 0 && rest & $value == $value {
                        if !first {
                            f.write_str(" | ")?;
                        }
                        f.write_str(stringify!($flag))?;
                        rest &= !$value;
                        first = false;
                    }
                )+
                if rest != 0 {
                    if !first {
                        f.write_str(" | ")?;
                    }
                    write!(f, "{rest:#x}")?;
                }
                f.write_str(")")
            }
        }
    };
}

flag_set! {
    /// `enum ibv_access_flags`: rights of a memory region or of a QP's remote peer.
    ///
    /// The optional flags (`IBV_ACCESS_OPTIONAL_RANGE`, e.g. relaxed ordering) are not
    /// offered: the exported `ibv_reg_mr` symbol does not take them.
    pub struct AccessFlags {
        /// The local HCA may write (required with any remote write or atomic).
        const LOCAL_WRITE = sys::IBV_ACCESS_LOCAL_WRITE;
        /// Peers may RDMA WRITE.
        const REMOTE_WRITE = sys::IBV_ACCESS_REMOTE_WRITE;
        /// Peers may RDMA READ.
        const REMOTE_READ = sys::IBV_ACCESS_REMOTE_READ;
        /// Peers may perform atomics.
        const REMOTE_ATOMIC = sys::IBV_ACCESS_REMOTE_ATOMIC;
        /// Memory windows may be bound.
        const MW_BIND = sys::IBV_ACCESS_MW_BIND;
        /// Zero-based virtual addresses.
        const ZERO_BASED = sys::IBV_ACCESS_ZERO_BASED;
        /// On-demand paging.
        const ON_DEMAND = sys::IBV_ACCESS_ON_DEMAND;
        /// Huge pages hint.
        const HUGETLB = sys::IBV_ACCESS_HUGETLB;
    }
}

impl AccessFlags {
    /// Local write plus remote write, read and atomic: what a data buffer of a connected
    /// peer usually needs.
    pub const ALL_REMOTE: Self = Self::LOCAL_WRITE
        .union(Self::REMOTE_WRITE)
        .union(Self::REMOTE_READ)
        .union(Self::REMOTE_ATOMIC);
}

flag_set! {
    /// `enum ibv_send_flags`.
    pub struct SendFlags {
        /// Wait for earlier RDMA READ/atomics before this request.
        const FENCE = sys::IBV_SEND_FENCE;
        /// Generate a completion (needed unless the QP signals all).
        const SIGNALED = sys::IBV_SEND_SIGNALED;
        /// Solicited event at the receiver.
        const SOLICITED = sys::IBV_SEND_SOLICITED;
        /// Copy the payload into the WQE (up to `max_inline_data`).
        const INLINE = sys::IBV_SEND_INLINE;
        /// IP checksum offload.
        const IP_CSUM = sys::IBV_SEND_IP_CSUM;
    }
}

flag_set! {
    /// `enum ibv_qp_attr_mask`: which fields of an `ibv_qp_attr` a modify or query uses.
    pub struct QpAttrMask {
        /// `qp_state`.
        const STATE = sys::IBV_QP_STATE;
        /// `cur_qp_state`.
        const CUR_STATE = sys::IBV_QP_CUR_STATE;
        /// `en_sqd_async_notify`.
        const EN_SQD_ASYNC_NOTIFY = sys::IBV_QP_EN_SQD_ASYNC_NOTIFY;
        /// `qp_access_flags`.
        const ACCESS_FLAGS = sys::IBV_QP_ACCESS_FLAGS;
        /// `pkey_index`.
        const PKEY_INDEX = sys::IBV_QP_PKEY_INDEX;
        /// `port_num`.
        const PORT = sys::IBV_QP_PORT;
        /// `qkey`.
        const QKEY = sys::IBV_QP_QKEY;
        /// `ah_attr`.
        const AV = sys::IBV_QP_AV;
        /// `path_mtu`.
        const PATH_MTU = sys::IBV_QP_PATH_MTU;
        /// `timeout`.
        const TIMEOUT = sys::IBV_QP_TIMEOUT;
        /// `retry_cnt`.
        const RETRY_CNT = sys::IBV_QP_RETRY_CNT;
        /// `rnr_retry`.
        const RNR_RETRY = sys::IBV_QP_RNR_RETRY;
        /// `rq_psn`.
        const RQ_PSN = sys::IBV_QP_RQ_PSN;
        /// `max_rd_atomic`.
        const MAX_QP_RD_ATOMIC = sys::IBV_QP_MAX_QP_RD_ATOMIC;
        /// Alternate path fields.
        const ALT_PATH = sys::IBV_QP_ALT_PATH;
        /// `min_rnr_timer`.
        const MIN_RNR_TIMER = sys::IBV_QP_MIN_RNR_TIMER;
        /// `sq_psn`.
        const SQ_PSN = sys::IBV_QP_SQ_PSN;
        /// `max_dest_rd_atomic`.
        const MAX_DEST_RD_ATOMIC = sys::IBV_QP_MAX_DEST_RD_ATOMIC;
        /// `path_mig_state`.
        const PATH_MIG_STATE = sys::IBV_QP_PATH_MIG_STATE;
        /// `cap`.
        const CAP = sys::IBV_QP_CAP;
        /// `dest_qp_num`.
        const DEST_QPN = sys::IBV_QP_DEST_QPN;
        /// `rate_limit`.
        const RATE_LIMIT = sys::IBV_QP_RATE_LIMIT;
    }
}

flag_set! {
    /// `enum ibv_wc_flags`: what else a completion carries.
    pub struct WcFlags {
        /// A GRH precedes the payload in the receive buffer.
        const GRH = sys::IBV_WC_GRH;
        /// `imm_data` is valid.
        const WITH_IMM = sys::IBV_WC_WITH_IMM;
        /// IP checksum verified.
        const IP_CSUM_OK = sys::IBV_WC_IP_CSUM_OK;
        /// `invalidated_rkey` is valid.
        const WITH_INV = sys::IBV_WC_WITH_INV;
        /// Tag matching sync request.
        const TM_SYNC_REQ = sys::IBV_WC_TM_SYNC_REQ;
        /// Tag matched.
        const TM_MATCH = sys::IBV_WC_TM_MATCH;
        /// Tag matching data valid.
        const TM_DATA_VALID = sys::IBV_WC_TM_DATA_VALID;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let a = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        assert!(a.contains(AccessFlags::LOCAL_WRITE));
        assert!(!a.contains(AccessFlags::REMOTE_WRITE));
        assert_eq!(a.bits(), 0b101);
        assert_eq!((a & AccessFlags::REMOTE_READ).bits(), 0b100);
        assert!(AccessFlags::EMPTY.is_empty());
        assert_eq!(AccessFlags::ALL_REMOTE.bits(), 0xf);
    }

    #[test]
    fn debug_names_known_and_unknown_bits() {
        let m = QpAttrMask::STATE | QpAttrMask::from_bits(1 << 30);
        assert_eq!(format!("{m:?}"), "QpAttrMask(STATE | 0x40000000)");
        assert_eq!(format!("{:?}", SendFlags::EMPTY), "SendFlags()");
    }
}
