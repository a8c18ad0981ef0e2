//! [`Settings`]: what an endpoint builds, and the placement of its QPs on devices.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use vqp_core::{Config, Mode};

use crate::card::Capabilities;
use crate::connect;

/// What [`Endpoint::create`](super::Endpoint::create) builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The virtual QP's configuration. `recv_seq` is ignored: the peer's card sets it.
    pub config: Config,
    /// Number of data QPs (1 to the virtual QP type's `N`).
    pub data_qps: usize,
    /// Local port (from 1).
    pub port: u8,
    /// Local GID index to address the peer by GID. `None` addresses by LID on
    /// InfiniBand and, on Ethernet (RoCE) ports, which need a GID, uses each port's
    /// [`Context::default_gid_index`](crate::Context::default_gid_index): its first
    /// RoCE v2 GID holding an IPv4 address, else its first RoCE v2 GID, else 0.
    pub gid_index: Option<u8>,
    /// Completion queue entries to ask for at least; the CQ is never smaller than
    /// every WQE its QPs can have outstanding, which is what vqp-core requires.
    pub min_cq_entries: u32,
    /// Under [`Policy::Weighted`](vqp_core::Policy::Weighted), weigh each device's data
    /// QPs by its port's bandwidth
    /// ([`Context::query_port_speed`](crate::Context::query_port_speed) where the library
    /// has it, else [`PortAttr::rate_mbps`](crate::PortAttr::rate_mbps)),
    /// replacing `config.weights` (a port whose rate is unknown keeps its configured
    /// weight). On by default; turn it off to weigh by `config.weights` alone. Other
    /// policies ignore it (the adaptive one measures rather than trust the port).
    pub weights_from_ports: bool,
    /// Require the peer to speak fail-back ([`Capabilities::FAIL_BACK`]): a peer
    /// without it is refused at card exchange rather than meet a failed data QP it
    /// cannot replace. Off by default (fail-back is still offered, and used when the
    /// peer has it).
    pub fail_back: bool,
}

impl Settings {
    /// `data_qps` data QPs in `config.mode` on port 1, with a random first DQPLB
    /// sequence number (so that a restarted peer's stale fragments fall outside the
    /// window).
    pub fn new(config: Config, data_qps: usize) -> Self {
        Settings {
            config: Config {
                send_seq: random_24bit(),
                ..config
            },
            data_qps,
            port: 1,
            gid_index: None,
            min_cq_entries: 0,
            weights_from_ports: true,
            fail_back: false,
        }
    }

    /// The capabilities this side requires of the peer: its mode's; in DQPLB with
    /// re-dispatch, a receiver that ignores the duplicates re-posting makes; fail-back
    /// when [`Settings::fail_back`] asks for it.
    pub fn required(&self) -> Capabilities {
        let mut bits = Capabilities::required_for(self.config.mode).0;
        if self.config.redispatch && self.config.mode == Mode::Dqplb {
            bits |= Capabilities::DUPLICATE_TOLERANT.0;
        }
        if self.fail_back {
            bits |= Capabilities::FAIL_BACK.0;
        }
        Capabilities(bits)
    }

    /// Whether this set-up has a SPRAY notify QP.
    pub fn has_notify(&self) -> bool {
        self.config.mode == Mode::Spray && self.data_qps > 1
    }

    /// Completion queue entries vqp-core requires: every data and notify QP's send and
    /// receive depth.
    pub fn cq_entries_needed(&self) -> u64 {
        let qps = self.data_qps as u64 + u64::from(self.has_notify());
        qps * self.entries_per_qp()
    }

    /// Completion queue entries vqp-core requires of device `device`'s CQ when the
    /// QPs are spread over `devices` devices as [`Endpoint::create_on`](super::Endpoint::create_on) places them:
    /// data QP `i` on device `i % devices`, the notify QP on device 0 — or, once
    /// fail-back moved it off a device that went down, on any device with a data QP,
    /// so each of those has room for it too.
    pub fn cq_entries_needed_on(&self, device: usize, devices: usize) -> u64 {
        let data = (0..self.data_qps)
            .filter(|&i| device_of(i, devices) == device)
            .count() as u64;
        let notify = u64::from(self.has_notify() && (device == 0 || data > 0));
        (data + notify) * self.entries_per_qp()
    }

    fn entries_per_qp(&self) -> u64 {
        u64::from(self.config.max_outstanding) + u64::from(self.config.recv_depth)
    }
}

/// The device (index among `devices`) data QP `i` goes on: round-robin.
pub fn device_of(i: usize, devices: usize) -> usize {
    i % devices.max(1)
}

/// A random 24-bit number (a PSN or a first sequence number), from the standard
/// library's per-process random hash keys.
pub(crate) fn random_24bit() -> u32 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    (h.finish() as u32) & connect::MAX_24BIT
}
