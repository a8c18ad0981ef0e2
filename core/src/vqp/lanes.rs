//! The physical QPs under a virtual QP and where fragments go: the data QPs' lanes,
//! SPRAY's notify lane, the masks a dispatch round reads and writes (which QPs have
//! room, which have a chain staged), the devices they are on, and the striping state
//! (the round-robin cursor, the weighted policies' schedule, the adaptive meter).
//!
//! Its fields are read and written by the virtual QP's dispatch, completion and
//! failover work, which hold a lane and a mask (or a send slot) at once; what needs
//! the lanes alone is here.

use super::config::{BuildError, Config, Mode};
use super::lane::Lane;
use super::policy::{Policy, Striping, SLOW_START};
use crate::phys::PhysQp;
use crate::wr::MAX_DEVICES;

/// The data QPs (up to `N`, `D` WQEs tracked each) and the notify QP of a virtual QP.
pub(super) struct Lanes<Q, const N: usize, const D: usize> {
    /// The data QPs, by index.
    pub(super) data: heapless::Vec<Lane<Q, D>, N>,
    /// SPRAY's notify QP, with several data QPs.
    pub(super) notify: Option<Lane<Q, D>>,
    /// Bit `i` set: data QP `i` is healthy and below its limit of WQEs.
    pub(super) room: u64,
    /// Bit `i` set: data QP `i` has a chain staged this round.
    pub(super) staged: u64,
    /// Devices of the data QPs (bit per device index).
    pub(super) data_devices: u8,
    /// The notify QP's device bit; 0 when there is no notify QP.
    pub(super) notify_device: u8,
    /// The data QP round-robin tries next.
    pub(super) next: u32,
    /// The weighted policies' schedule and the adaptive policy's meter.
    pub(super) striping: Striping<N>,
    /// Round-robin over every data QP: a request's shares may be staged in one go.
    pub(super) even: bool,
    /// A weighted or adaptive policy: a request's shares follow the schedule.
    pub(super) scheduled: bool,
}

impl<Q: PhysQp, const N: usize, const D: usize> Lanes<Q, N, D> {
    /// Lanes over `data` (QP, device index) pairs and `notify`, checked against `cfg`:
    /// between 1 and `N` data QPs, devices below [`MAX_DEVICES`] with a weight, and a
    /// notify QP exactly when SPRAY has several data QPs.
    pub(super) fn new(
        cfg: &Config,
        data: impl IntoIterator<Item = (Q, u8)>,
        notify: Option<(Q, u8)>,
    ) -> Result<Self, BuildError> {
        let mut lanes = heapless::Vec::new();
        let mut given = 0;
        let mut data_devices = 0u8;
        for (qp, device) in data {
            given += 1;
            if device as usize >= MAX_DEVICES {
                return Err(BuildError::Device(device));
            }
            data_devices |= 1 << device;
            if lanes
                .push(Lane::new(qp, device, cfg.max_outstanding))
                .is_err()
            {
                // Keep counting so the error says how many were given.
            }
        }
        if given == 0 || given > N {
            return Err(BuildError::DataQps { given, capacity: N });
        }
        let wants_notify = cfg.mode == Mode::Spray && given > 1;
        if wants_notify != notify.is_some() {
            return Err(BuildError::NotifyQp {
                given: notify.is_some(),
            });
        }
        for lane in &lanes {
            if cfg.weights[lane.device as usize] == 0 {
                return Err(BuildError::Weight(lane.device));
            }
        }
        let weigh = cfg.policy != Policy::RoundRobin;
        let slow_start = cfg.policy == Policy::Adaptive && given > 1;
        for lane in lanes.iter_mut() {
            if slow_start {
                lane.limit = cfg.max_outstanding.min(SLOW_START);
            }
            lane.weigh = weigh;
            lane.track = cfg.redispatch;
            lane.tally = weigh || cfg.redispatch || cfg.count_bytes;
        }
        let striping = Striping::new(
            lanes
                .iter()
                .map(|l| u64::from(cfg.weights[l.device as usize])),
            lanes.len(),
        );
        let notify = match notify {
            Some((_, d)) if d as usize >= MAX_DEVICES => return Err(BuildError::Device(d)),
            Some((qp, d)) => Some(Lane::new(qp, d, cfg.max_outstanding)),
            None => None,
        };
        let notify_device = notify.as_ref().map_or(0, |l| 1 << l.device);
        let room = if given == 64 {
            u64::MAX
        } else {
            (1u64 << given) - 1
        };
        Ok(Lanes {
            data: lanes,
            notify,
            room,
            staged: 0,
            data_devices,
            notify_device,
            next: 0,
            striping,
            even: cfg.policy == Policy::RoundRobin
                && (cfg.fanout == 0 || usize::from(cfg.fanout) >= given),
            scheduled: matches!(cfg.policy, Policy::Weighted | Policy::Adaptive),
        })
    }

    /// Data QP `i`'s lane, or the notify QP's for `i == data.len()`.
    pub(super) fn data_or_notify(&self, i: usize) -> Option<&Lane<Q, D>> {
        match self.data.get(i) {
            Some(l) => Some(l),
            None if i == self.data.len() => self.notify.as_ref(),
            None => None,
        }
    }

    /// The WQEs each device's CQ must hold for these QPs, `per_qp` each.
    pub(super) fn cq_demand(&self, per_qp: u64) -> [u64; MAX_DEVICES] {
        let mut demand = [0u64; MAX_DEVICES];
        for lane in self.data.iter().chain(self.notify.iter()) {
            demand[lane.device as usize] += per_qp;
        }
        demand
    }
}
