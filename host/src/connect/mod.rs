//! Connecting an RC queue pair: RESET → INIT → RTR → RTS from one [`Path`].
//!
//! A [`Path`] says everything both ends agreed on: the local port and P_Key index, the
//! remote address (LID, or GID + source GID index for RoCE and routed InfiniBand), the
//! remote QP number, both PSNs, and the reliability knobs. [`Path::new`] fills the knobs
//! with the values the ConnectX programming guides use:
//!
//! | field | default | meaning |
//! |---|---|---|
//! | `mtu` | 4096, lowered to the port's active MTU | path MTU |
//! | `timeout` | 14 | local ACK timeout, 4.096 µs × 2^14 ≈ 67 ms |
//! | `retry_cnt` | 7 | transport retries |
//! | `rnr_retry` | 7 | RNR retries (7 = retry forever) |
//! | `min_rnr_timer` | 12 | 0.64 ms RNR NAK delay |
//! | `max_rd_atomic`, `max_dest_rd_atomic` | 16, lowered to the device's limits | outstanding READ/atomic |
//! | `access` | remote write, read, atomic | what the peer may do through this QP |
//!
//! Each transition sets exactly the attribute-mask bits the IB specification requires for
//! an RC QP ([`INIT_MASK`], [`RTR_MASK`], [`RTS_MASK`]); the attribute builders are pure
//! functions, so the masks and values are tested without a device.

use crate::enums::{Mtu, QpState};
use crate::error::{Error, Result};
use crate::flags::{AccessFlags, QpAttrMask};
use crate::sys;
use crate::verbs::{DeviceAttr, Gid, PortAttr, QueuePair};

/// Mask of RESET → INIT: state, P_Key index, port, access flags.
pub const INIT_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::PKEY_INDEX)
    .union(QpAttrMask::PORT)
    .union(QpAttrMask::ACCESS_FLAGS);

/// Mask of INIT → RTR: state, address vector, path MTU, destination QPN, receive PSN,
/// responder resources, minimum RNR timer.
pub const RTR_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::AV)
    .union(QpAttrMask::PATH_MTU)
    .union(QpAttrMask::DEST_QPN)
    .union(QpAttrMask::RQ_PSN)
    .union(QpAttrMask::MAX_DEST_RD_ATOMIC)
    .union(QpAttrMask::MIN_RNR_TIMER);

/// Mask of RTR → RTS: state, timeout, retry count, RNR retry, send PSN, initiator depth.
pub const RTS_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::TIMEOUT)
    .union(QpAttrMask::RETRY_CNT)
    .union(QpAttrMask::RNR_RETRY)
    .union(QpAttrMask::SQ_PSN)
    .union(QpAttrMask::MAX_QP_RD_ATOMIC);

/// Largest PSN or QP number (24 bits).
pub const MAX_24BIT: u32 = (1 << 24) - 1;

/// The global route of an address: needed on RoCE and across InfiniBand subnets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalRoute {
    /// The remote port's GID.
    pub dgid: Gid,
    /// Index of the local GID to send from (selects RoCE v1/v2 and the IP version).
    pub sgid_index: u8,
    /// Hop limit (default 64).
    pub hop_limit: u8,
    /// Traffic class (default 0).
    pub traffic_class: u8,
    /// Flow label (default 0).
    pub flow_label: u32,
}

/// Where the remote QP is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Address {
    /// Remote LID (InfiniBand; ignored by RoCE).
    pub lid: u16,
    /// Global route, when the path needs a GRH.
    pub grh: Option<GlobalRoute>,
    /// Service level.
    pub sl: u8,
}

impl Address {
    /// An InfiniBand address by LID, without GRH.
    pub const fn lid(lid: u16) -> Self {
        Address {
            lid,
            grh: None,
            sl: 0,
        }
    }

    /// An address by GID (RoCE, or routed InfiniBand), sending from local GID
    /// `sgid_index`.
    pub const fn gid(dgid: Gid, sgid_index: u8) -> Self {
        Address {
            lid: 0,
            grh: Some(GlobalRoute {
                dgid,
                sgid_index,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }),
            sl: 0,
        }
    }
}

/// Everything needed to take an RC QP from RESET to RTS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Path {
    /// Local port (from 1).
    pub port: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// Requested path MTU; [`Path::limit_to`] lowers it to the port's active MTU.
    pub mtu: Mtu,
    /// The remote address.
    pub remote: Address,
    /// Remote QP number (24 bits).
    pub remote_qpn: u32,
    /// First PSN this side sends (the peer's `remote_psn`; 24 bits).
    pub local_psn: u32,
    /// First PSN this side expects (the peer's `local_psn`; 24 bits).
    pub remote_psn: u32,
    /// Local ACK timeout exponent (0–31; 0 = infinite).
    pub timeout: u8,
    /// Transport retry count (0–7).
    pub retry_cnt: u8,
    /// RNR retry count (0–7; 7 = infinite).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code (0–31).
    pub min_rnr_timer: u8,
    /// Outstanding RDMA READ/atomic as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ/atomic as responder.
    pub max_dest_rd_atomic: u8,
    /// What the peer may do through this QP.
    pub access: AccessFlags,
}

impl Path {
    /// Default path MTU.
    pub const DEFAULT_MTU: Mtu = Mtu::Mtu4096;
    /// Default local ACK timeout exponent.
    pub const DEFAULT_TIMEOUT: u8 = 14;
    /// Default transport retry count.
    pub const DEFAULT_RETRY_CNT: u8 = 7;
    /// Default RNR retry count (infinite).
    pub const DEFAULT_RNR_RETRY: u8 = 7;
    /// Default minimum RNR NAK timer code.
    pub const DEFAULT_MIN_RNR_TIMER: u8 = 12;
    /// Default outstanding READ/atomic, each direction (before device limits).
    pub const DEFAULT_RD_ATOMIC: u8 = 16;
    /// Default remote access.
    pub const DEFAULT_ACCESS: AccessFlags = AccessFlags::REMOTE_WRITE
        .union(AccessFlags::REMOTE_READ)
        .union(AccessFlags::REMOTE_ATOMIC);

    /// A path with the defaults of the module table, P_Key index 0.
    pub const fn new(
        port: u8,
        remote: Address,
        remote_qpn: u32,
        local_psn: u32,
        remote_psn: u32,
    ) -> Self {
        Path {
            port,
            pkey_index: 0,
            mtu: Self::DEFAULT_MTU,
            remote,
            remote_qpn,
            local_psn,
            remote_psn,
            timeout: Self::DEFAULT_TIMEOUT,
            retry_cnt: Self::DEFAULT_RETRY_CNT,
            rnr_retry: Self::DEFAULT_RNR_RETRY,
            min_rnr_timer: Self::DEFAULT_MIN_RNR_TIMER,
            max_rd_atomic: Self::DEFAULT_RD_ATOMIC,
            max_dest_rd_atomic: Self::DEFAULT_RD_ATOMIC,
            access: Self::DEFAULT_ACCESS,
        }
    }

    /// This path with the MTU lowered to the port's active MTU and the READ/atomic
    /// depths lowered to the device's limits (`max_qp_init_rd_atom` for the initiator,
    /// `max_qp_rd_atom` for the responder).
    pub fn limit_to(&self, port: &PortAttr, device: &DeviceAttr) -> Path {
        let cap = |v: u8, limit: u32| -> u8 { u8::try_from(u32::from(v).min(limit)).unwrap_or(v) };
        Path {
            mtu: self.mtu.min(port.active_mtu()),
            max_rd_atomic: cap(self.max_rd_atomic, device.max_qp_init_rd_atom()),
            max_dest_rd_atomic: cap(self.max_dest_rd_atomic, device.max_qp_rd_atom()),
            ..*self
        }
    }

    /// Checks the ranges the specification gives each field.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the first field out of range.
    pub fn validate(&self) -> Result<()> {
        let bad = |what| Err(Error::InvalidArgument { what });
        if self.port == 0 {
            return bad("port numbers start at 1");
        }
        if self.remote_qpn > MAX_24BIT {
            return bad("remote QP number exceeds 24 bits");
        }
        if self.local_psn > MAX_24BIT || self.remote_psn > MAX_24BIT {
            return bad("PSN exceeds 24 bits");
        }
        if self.timeout > 31 {
            return bad("timeout exceeds 31");
        }
        if self.retry_cnt > 7 {
            return bad("retry count exceeds 7");
        }
        if self.rnr_retry > 7 {
            return bad("RNR retry exceeds 7");
        }
        if self.min_rnr_timer > 31 {
            return bad("minimum RNR timer exceeds 31");
        }
        if self.mtu.bytes().is_none() {
            return bad("unknown path MTU");
        }
        Ok(())
    }

    /// Attributes and mask of RESET → INIT.
    pub fn init_attr(&self) -> (sys::ibv_qp_attr, QpAttrMask) {
        let attr = sys::ibv_qp_attr {
            qp_state: QpState::Init.as_raw(),
            pkey_index: self.pkey_index,
            port_num: self.port,
            qp_access_flags: self.access.bits(),
            ..Default::default()
        };
        (attr, INIT_MASK)
    }

    /// Attributes and mask of INIT → RTR.
    pub fn rtr_attr(&self) -> (sys::ibv_qp_attr, QpAttrMask) {
        let mut ah = sys::ibv_ah_attr {
            dlid: self.remote.lid,
            sl: self.remote.sl,
            port_num: self.port,
            ..Default::default()
        };
        if let Some(grh) = self.remote.grh {
            ah.is_global = 1;
            ah.grh = sys::ibv_global_route {
                dgid: grh.dgid.to_sys(),
                flow_label: grh.flow_label,
                sgid_index: grh.sgid_index,
                hop_limit: grh.hop_limit,
                traffic_class: grh.traffic_class,
            };
        }
        let attr = sys::ibv_qp_attr {
            qp_state: QpState::Rtr.as_raw(),
            path_mtu: self.mtu.as_raw(),
            dest_qp_num: self.remote_qpn,
            rq_psn: self.remote_psn,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            ah_attr: ah,
            ..Default::default()
        };
        (attr, RTR_MASK)
    }

    /// Attributes and mask of RTR → RTS.
    pub fn rts_attr(&self) -> (sys::ibv_qp_attr, QpAttrMask) {
        let attr = sys::ibv_qp_attr {
            qp_state: QpState::Rts.as_raw(),
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            sq_psn: self.local_psn,
            max_rd_atomic: self.max_rd_atomic,
            ..Default::default()
        };
        (attr, RTS_MASK)
    }
}

/// Moves `qp` from RESET to INIT. Receives may be posted from here on.
pub fn to_init(qp: &QueuePair, path: &Path) -> Result<()> {
    path.validate()?;
    let (attr, mask) = path.init_attr();
    qp.modify_named(&attr, mask, "ibv_modify_qp (RESET to INIT)")
}

/// Moves `qp` from INIT to RTR. `path` should already be limited
/// ([`Path::limit_to`]).
pub fn to_rtr(qp: &QueuePair, path: &Path) -> Result<()> {
    path.validate()?;
    let (attr, mask) = path.rtr_attr();
    qp.modify_named(&attr, mask, "ibv_modify_qp (INIT to RTR)")
}

/// Moves `qp` from RTR to RTS.
pub fn to_rts(qp: &QueuePair, path: &Path) -> Result<()> {
    path.validate()?;
    let (attr, mask) = path.rts_attr();
    qp.modify_named(&attr, mask, "ibv_modify_qp (RTR to RTS)")
}

/// Takes `qp` from RESET to RTS along `path`, after limiting the path to what the port
/// and device support. Returns the path actually applied (send it to no one: the peer
/// limits its own side).
///
/// # Errors
/// [`Error::InvalidArgument`] for out-of-range fields or a port whose link layer needs a
/// GRH (Ethernet) when the address has none; [`Error::Verbs`] naming the failed query or
/// transition.
pub fn connect(qp: &QueuePair, path: &Path) -> Result<Path> {
    path.validate()?;
    let ctx = qp.context();
    let port = ctx.query_port(path.port)?;
    let device = ctx.query_device()?;
    if port.needs_grh() && path.remote.grh.is_none() {
        return Err(Error::InvalidArgument {
            what: "the port is Ethernet (RoCE): the remote address needs a GID",
        });
    }
    let effective = path.limit_to(&port, &device);
    to_init(qp, &effective)?;
    to_rtr(qp, &effective)?;
    to_rts(qp, &effective)?;
    Ok(effective)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> Path {
        Path::new(1, Address::lid(0x12), 0x123, 0x111, 0x222)
    }

    #[test]
    fn defaults_match_the_programming_guides() {
        let p = path();
        assert_eq!(p.mtu, Mtu::Mtu4096);
        assert_eq!(p.timeout, 14);
        assert_eq!(p.retry_cnt, 7);
        assert_eq!(p.rnr_retry, 7);
        assert_eq!(p.min_rnr_timer, 12);
        assert_eq!((p.max_rd_atomic, p.max_dest_rd_atomic), (16, 16));
        assert_eq!(p.pkey_index, 0);
        assert!(p.validate().is_ok());
    }

    #[test]
    fn masks_are_exactly_the_required_bits() {
        let b = |m: QpAttrMask| m.bits();
        assert_eq!(
            b(INIT_MASK),
            sys::IBV_QP_STATE
                | sys::IBV_QP_PKEY_INDEX
                | sys::IBV_QP_PORT
                | sys::IBV_QP_ACCESS_FLAGS
        );
        assert_eq!(
            b(RTR_MASK),
            sys::IBV_QP_STATE
                | sys::IBV_QP_AV
                | sys::IBV_QP_PATH_MTU
                | sys::IBV_QP_DEST_QPN
                | sys::IBV_QP_RQ_PSN
                | sys::IBV_QP_MAX_DEST_RD_ATOMIC
                | sys::IBV_QP_MIN_RNR_TIMER
        );
        assert_eq!(
            b(RTS_MASK),
            sys::IBV_QP_STATE
                | sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_SQ_PSN
                | sys::IBV_QP_MAX_QP_RD_ATOMIC
        );
    }

    #[test]
    fn attributes_carry_the_path() {
        let p = path();
        let (a, m) = p.init_attr();
        assert_eq!(m, INIT_MASK);
        assert_eq!(a.qp_state, sys::IBV_QPS_INIT);
        assert_eq!(a.port_num, 1);
        assert_eq!(
            a.qp_access_flags,
            sys::IBV_ACCESS_REMOTE_WRITE
                | sys::IBV_ACCESS_REMOTE_READ
                | sys::IBV_ACCESS_REMOTE_ATOMIC
        );

        let (a, m) = p.rtr_attr();
        assert_eq!(m, RTR_MASK);
        assert_eq!(a.qp_state, sys::IBV_QPS_RTR);
        assert_eq!(a.path_mtu, sys::IBV_MTU_4096);
        assert_eq!(a.dest_qp_num, 0x123);
        assert_eq!(a.rq_psn, 0x222);
        assert_eq!(a.ah_attr.dlid, 0x12);
        assert_eq!(a.ah_attr.is_global, 0);
        assert_eq!(a.ah_attr.port_num, 1);
        assert_eq!((a.max_dest_rd_atomic, a.min_rnr_timer), (16, 12));

        let (a, m) = p.rts_attr();
        assert_eq!(m, RTS_MASK);
        assert_eq!(a.qp_state, sys::IBV_QPS_RTS);
        assert_eq!(a.sq_psn, 0x111);
        assert_eq!(
            (a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic),
            (14, 7, 7, 16)
        );
    }

    #[test]
    fn gid_address_sets_the_grh() {
        let gid = Gid::from_bytes([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        let p = Path::new(1, Address::gid(gid, 3), 7, 0, 0);
        let (a, _) = p.rtr_attr();
        assert_eq!(a.ah_attr.is_global, 1);
        assert_eq!(a.ah_attr.grh.sgid_index, 3);
        assert_eq!(a.ah_attr.grh.hop_limit, 64);
        assert_eq!(Gid::from_sys(&a.ah_attr.grh.dgid), gid);
    }

    #[test]
    fn limits_lower_mtu_and_depths() {
        let mut port = sys::ibv_port_attr {
            active_mtu: sys::IBV_MTU_1024,
            ..Default::default()
        };
        let dev = sys::ibv_device_attr {
            max_qp_init_rd_atom: 4,
            max_qp_rd_atom: 8,
            ..Default::default()
        };
        let p = path().limit_to(&PortAttr::from_raw(port), &DeviceAttr::from_raw(dev));
        assert_eq!(p.mtu, Mtu::Mtu1024);
        assert_eq!((p.max_rd_atomic, p.max_dest_rd_atomic), (4, 8));

        // A port reporting a larger MTU than asked keeps the request; an unknown active
        // MTU is not trusted.
        port.active_mtu = sys::IBV_MTU_4096;
        let mut small = path();
        small.mtu = Mtu::Mtu2048;
        assert_eq!(
            small
                .limit_to(&PortAttr::from_raw(port), &DeviceAttr::from_raw(dev))
                .mtu,
            Mtu::Mtu2048
        );
        port.active_mtu = 42;
        assert_eq!(
            path()
                .limit_to(&PortAttr::from_raw(port), &DeviceAttr::from_raw(dev))
                .mtu,
            Mtu::Mtu4096
        );
    }

    #[test]
    fn validation_rejects_out_of_range_fields() {
        let cases: [fn(&mut Path); 8] = [
            |p| p.port = 0,
            |p| p.remote_qpn = 1 << 24,
            |p| p.local_psn = 1 << 24,
            |p| p.timeout = 32,
            |p| p.retry_cnt = 8,
            |p| p.rnr_retry = 8,
            |p| p.min_rnr_timer = 32,
            |p| p.mtu = Mtu::Unknown(0),
        ];
        for f in cases {
            let mut p = path();
            f(&mut p);
            assert!(
                matches!(p.validate(), Err(Error::InvalidArgument { .. })),
                "{p:?}"
            );
        }
    }
}
