//! Query results: device attributes, port attributes (a GID is [`vqp_sys::Gid`]).

use std::ffi::CStr;

use crate::enums::{AtomicCap, LinkLayer, Mtu, PortState};
use crate::sys;

/// A device's attributes (`ibv_query_device`).
#[derive(Clone, Copy, Debug)]
pub struct DeviceAttr {
    raw: sys::ibv_device_attr,
}

impl DeviceAttr {
    /// Wraps a raw struct (as filled by `ibv_query_device`).
    pub fn from_raw(raw: sys::ibv_device_attr) -> Self {
        DeviceAttr { raw }
    }

    /// The raw struct as the library filled it.
    pub fn raw(&self) -> &sys::ibv_device_attr {
        &self.raw
    }

    /// Firmware version text.
    pub fn fw_ver(&self) -> String {
        c_chars_to_string(&self.raw.fw_ver)
    }

    /// Node GUID in host byte order.
    pub fn node_guid(&self) -> u64 {
        u64::from_be(self.raw.node_guid)
    }

    /// Maximum outstanding work requests per queue.
    pub fn max_qp_wr(&self) -> u32 {
        nonneg(self.raw.max_qp_wr)
    }

    /// Maximum scatter/gather entries per work request.
    pub fn max_sge(&self) -> u32 {
        nonneg(self.raw.max_sge)
    }

    /// Maximum entries per CQ.
    pub fn max_cqe(&self) -> u32 {
        nonneg(self.raw.max_cqe)
    }

    /// Maximum outstanding RDMA READ/atomic per QP as responder (bounds
    /// `max_dest_rd_atomic`).
    pub fn max_qp_rd_atom(&self) -> u32 {
        nonneg(self.raw.max_qp_rd_atom)
    }

    /// Maximum outstanding RDMA READ/atomic per QP as initiator (bounds `max_rd_atomic`).
    pub fn max_qp_init_rd_atom(&self) -> u32 {
        nonneg(self.raw.max_qp_init_rd_atom)
    }

    /// Largest registrable region, bytes.
    pub fn max_mr_size(&self) -> u64 {
        self.raw.max_mr_size
    }

    /// Atomic capability.
    pub fn atomic_cap(&self) -> AtomicCap {
        AtomicCap::from_raw(self.raw.atomic_cap)
    }

    /// Number of physical ports (numbered from 1).
    pub fn phys_port_cnt(&self) -> u8 {
        self.raw.phys_port_cnt
    }
}

/// A port's attributes (`ibv_query_port`).
#[derive(Clone, Copy, Debug)]
pub struct PortAttr {
    raw: sys::ibv_port_attr,
}

impl PortAttr {
    /// Wraps a raw struct (as filled by `ibv_query_port`).
    pub fn from_raw(raw: sys::ibv_port_attr) -> Self {
        PortAttr { raw }
    }

    /// The raw struct as the library filled it (with the zeroed reserved tail).
    pub fn raw(&self) -> &sys::ibv_port_attr {
        &self.raw
    }

    /// Logical port state.
    pub fn state(&self) -> PortState {
        PortState::from_raw(self.raw.state)
    }

    /// Largest MTU the port supports.
    pub fn max_mtu(&self) -> Mtu {
        Mtu::from_raw(self.raw.max_mtu)
    }

    /// MTU in use on the link.
    pub fn active_mtu(&self) -> Mtu {
        Mtu::from_raw(self.raw.active_mtu)
    }

    /// Base LID (0 on Ethernet).
    pub fn lid(&self) -> u16 {
        self.raw.lid
    }

    /// Link layer.
    pub fn link_layer(&self) -> LinkLayer {
        LinkLayer::from_raw(self.raw.link_layer)
    }

    /// GID table length.
    pub fn gid_tbl_len(&self) -> u32 {
        nonneg(self.raw.gid_tbl_len)
    }

    /// Active link speed code; when the library reports the extended speed field
    /// (`active_speed_ex`, after rdma-core v44), that value wins.
    pub fn active_speed(&self) -> u32 {
        match self.raw.active_speed_ex() {
            0 => u32::from(self.raw.active_speed),
            ex => ex,
        }
    }

    /// Active link width code.
    pub fn active_width(&self) -> u8 {
        self.raw.active_width
    }

    /// The link's signalling rate in Mb/s, from its active speed and width as
    /// `ibv_query_port` reports them (the InfiniBand PortInfo encodings of rdma-core's
    /// `verbs.h`: per-lane 2.5, 5, 10, 10.3125, 14.0625, 25.78125, 53.125, 106.25 or
    /// 212.5 Gb/s for SDR … XDR; 1, 2, 4, 8 or 12 lanes). `None` for a code outside
    /// them. What the striping policies weigh devices by.
    pub fn rate_mbps(&self) -> Option<u64> {
        let lane = match self.active_speed() {
            1 => 2_500,
            2 => 5_000,
            4 => 10_000,
            8 => 10_313,
            16 => 14_063,
            32 => 25_781,
            64 => 53_125,
            128 => 106_250,
            256 => 212_500,
            _ => return None,
        };
        let lanes = match self.active_width() {
            1 => 1,
            2 => 4,
            4 => 8,
            8 => 12,
            16 => 2,
            _ => return None,
        };
        Some(lane * lanes)
    }

    /// Whether addressing needs a GRH (Ethernet link layer, i.e. RoCE).
    pub fn needs_grh(&self) -> bool {
        self.link_layer() == LinkLayer::Ethernet
    }
}

/// A negative count from the library means "none" to us.
fn nonneg(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// A fixed C char array to a `String`, up to the first NUL (or the whole array).
pub(crate) fn c_chars_to_string(chars: &[core::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().map(|&c| c as u8).collect();
    match CStr::from_bytes_until_nul(&bytes) {
        Ok(s) => s.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_attr_speed_prefers_extended_field() {
        let mut raw = sys::ibv_port_attr {
            active_speed: 32,
            ..Default::default()
        };
        assert_eq!(PortAttr::from_raw(raw).active_speed(), 32);
        raw.reserved[0] = 0x100;
        assert_eq!(PortAttr::from_raw(raw).active_speed(), 0x100);
    }

    #[test]
    fn port_rate_is_speed_times_width() {
        let rate = |active_speed, active_width| {
            PortAttr::from_raw(sys::ibv_port_attr {
                active_speed,
                active_width,
                ..Default::default()
            })
            .rate_mbps()
        };
        assert_eq!(rate(32, 2), Some(103_124)); // 4X EDR: "100 Gb/s"
        assert_eq!(rate(1, 2), Some(10_000)); // 4X SDR
        assert_eq!(rate(32, 1), Some(25_781)); // 1X EDR
        assert_eq!(rate(64, 16), Some(106_250)); // 2X HDR
        assert_eq!(rate(3, 2), None);
        assert_eq!(rate(1, 3), None);
    }

    #[test]
    fn port_attr_unknown_values_do_not_panic() {
        let raw = sys::ibv_port_attr {
            state: 77,
            active_mtu: 9,
            link_layer: 200,
            gid_tbl_len: -3,
            ..Default::default()
        };
        let p = PortAttr::from_raw(raw);
        assert_eq!(p.state(), PortState::Unknown(77));
        assert_eq!(p.active_mtu(), Mtu::Unknown(9));
        assert_eq!(p.link_layer(), LinkLayer::Unknown(200));
        assert_eq!(p.gid_tbl_len(), 0);
    }

    #[test]
    fn c_chars() {
        let mut chars = [0 as core::ffi::c_char; 8];
        for (d, s) in chars.iter_mut().zip(b"12.3") {
            *d = *s as core::ffi::c_char;
        }
        assert_eq!(c_chars_to_string(&chars), "12.3");
        let full = [b'a' as core::ffi::c_char; 4];
        assert_eq!(c_chars_to_string(&full), "aaaa");
    }
}
