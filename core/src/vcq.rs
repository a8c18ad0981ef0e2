//! The virtual completion queue: polls one physical CQ per device, routes each
//! physical completion to the virtual QP that owns it, and reports virtual
//! completions.
//!
//! Routing uses (device, qp_num, wr_id), never the opcode: verbs leaves the opcode
//! undefined in an error completion. The wr_id's tag names the virtual QP in O(1);
//! the virtual QP then checks the QP number and device against the lane the wr_id
//! names.

use crate::caps;
use core::fmt;

use crate::phys::{PhysCq, PhysQp, PhysWc, PollFailure};
use crate::vqp::VirtualQp;
use crate::wr::{Wc, WcOut, MAX_DEVICES};
use crate::wrid::WrId;

/// A CQ could not be added or a virtual QP attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CqError {
    /// The device index is not below [`MAX_DEVICES`], or the type's `DEVS` CQs are taken.
    Device(u8),
    /// The device already has a CQ.
    Duplicate(u8),
    /// A virtual QP uses a device this virtual CQ has no CQ for.
    NoCq(u8),
    /// The device's CQ cannot hold every WQE that could be outstanding.
    TooSmall {
        /// The device.
        device: u8,
        /// The CQ's capacity.
        capacity: u64,
        /// WQEs that could be outstanding with this virtual QP attached.
        needed: u64,
    },
    /// 256 virtual QPs are attached already.
    TooManyQps,
}

impl fmt::Display for CqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Device(d) => write!(f, "no room for a CQ of device {d}"),
            Self::Duplicate(d) => write!(f, "device {d} already has a CQ"),
            Self::NoCq(d) => write!(f, "no CQ for device {d}"),
            Self::TooSmall {
                device,
                capacity,
                needed,
            } => write!(
                f,
                "CQ of device {device} holds {capacity} completions but {needed} WQEs could be outstanding"
            ),
            Self::TooManyQps => f.write_str("at most 256 virtual QPs per virtual CQ"),
        }
    }
}

impl core::error::Error for CqError {}

struct DeviceCq<C> {
    cq: C,
    device: u8,
    capacity: u64,
    committed: u64,
}

/// Polls up to `DEVS` physical CQs (one per device), `B` physical completions at a
/// time, for the virtual QPs attached to it (capacities in [`caps`]'s one order).
pub struct VirtualCq<C, const DEVS: usize = { caps::DEVICES }, const B: usize = { caps::BATCH }> {
    cqs: heapless::Vec<DeviceCq<C>, DEVS>,
    attached: u16,
    scratch: [PhysWc; B],
    strays: u64,
}

impl<C: PhysCq, const DEVS: usize, const B: usize> VirtualCq<C, DEVS, B> {
    const CHECK: () = assert!(DEVS >= 1 && DEVS <= MAX_DEVICES && B >= 1);

    /// A virtual CQ with no physical CQ yet.
    pub const fn new() -> Self {
        let () = Self::CHECK;
        Self {
            cqs: heapless::Vec::new(),
            attached: 0,
            scratch: [PhysWc::EMPTY; B],
            strays: 0,
        }
    }

    /// Add `device`'s CQ, which holds `capacity` completions.
    pub fn add_cq(&mut self, cq: C, device: u8, capacity: u32) -> Result<(), CqError> {
        if device as usize >= MAX_DEVICES {
            return Err(CqError::Device(device));
        }
        if self.cqs.iter().any(|c| c.device == device) {
            return Err(CqError::Duplicate(device));
        }
        self.cqs
            .push(DeviceCq {
                cq,
                device,
                capacity: u64::from(capacity),
                committed: 0,
            })
            .map_err(|_| CqError::Device(device))
    }

    /// Attach `vqp`: check every CQ it uses can hold all it could have outstanding,
    /// then give it the next tag. Pass attached virtual QPs to [`Self::poll`] in the
    /// order they were attached.
    pub fn attach<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>(
        &mut self,
        vqp: &mut VirtualQp<Q, N, D, S, W>,
    ) -> Result<u8, CqError> {
        if self.attached > u16::from(u8::MAX) {
            return Err(CqError::TooManyQps);
        }
        let demand = vqp.cq_demand();
        for (device, &need) in demand.iter().enumerate() {
            if need == 0 {
                continue;
            }
            let cq = self
                .cqs
                .iter()
                .find(|c| c.device as usize == device)
                .ok_or(CqError::NoCq(device as u8))?;
            if cq.committed + need > cq.capacity {
                return Err(CqError::TooSmall {
                    device: device as u8,
                    capacity: cq.capacity,
                    needed: cq.committed + need,
                });
            }
        }
        for cq in self.cqs.iter_mut() {
            cq.committed += demand[cq.device as usize];
        }
        let tag = self.attached as u8;
        self.attached += 1;
        vqp.set_tag(tag);
        Ok(tag)
    }

    /// Poll every physical CQ once, route what comes back, let the virtual QPs post
    /// what completions enabled, and write up to `out.len()` virtual completions
    /// (each QP's sends then receives, each in posting order). Completions that do
    /// not fit stay queued for the next call.
    ///
    /// `vqps[i]` must be the virtual QP attached `i`-th.
    ///
    /// Marked for inlining: it is the body of the caller's polling loop, and inlined
    /// it is specialised to the caller's number of virtual QPs and buffer length and
    /// saves the call with its register spills (69 fewer instructions per round trip
    /// in the `A` bench, where it has several callers and was otherwise kept out of
    /// line).
    #[inline]
    pub fn poll<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>(
        &mut self,
        vqps: &mut [&mut VirtualQp<Q, N, D, S, W>],
        out: &mut [Wc],
    ) -> Result<usize, PollFailure> {
        self.poll_into(vqps, out)
    }

    /// [`poll`](Self::poll) into any [`WcOut`]: a caller whose completions have
    /// another layout has them written in place, with no copy between.
    #[inline]
    pub fn poll_into<
        Q: PhysQp,
        O: WcOut + ?Sized,
        const N: usize,
        const D: usize,
        const S: usize,
        const W: usize,
    >(
        &mut self,
        vqps: &mut [&mut VirtualQp<Q, N, D, S, W>],
        out: &mut O,
    ) -> Result<usize, PollFailure> {
        for dev in self.cqs.iter_mut() {
            let got = dev.cq.poll(&mut self.scratch)?;
            for wc in &self.scratch[..got] {
                let routed = match WrId::decode(wc.wr_id) {
                    Some(id) => match vqps.get_mut(id.tag as usize) {
                        Some(vqp) => vqp.route(wc, id, dev.device).is_ok(),
                        None => false,
                    },
                    None => false,
                };
                if !routed {
                    self.strays += 1;
                }
            }
        }
        let mut n = 0;
        for vqp in vqps.iter_mut() {
            vqp.progress();
            n += vqp.drain_into(out, n);
        }
        Ok(n)
    }

    /// Physical completions that no attached virtual QP owned.
    pub fn strays(&self) -> u64 {
        self.strays
    }

    /// The physical CQ of `device`.
    pub fn cq_mut(&mut self, device: u8) -> Option<&mut C> {
        self.cqs
            .iter_mut()
            .find(|c| c.device == device)
            .map(|c| &mut c.cq)
    }
}

impl<C: PhysCq, const DEVS: usize, const B: usize> Default for VirtualCq<C, DEVS, B> {
    fn default() -> Self {
        Self::new()
    }
}
