//! Building a virtual QP on one or several devices: create its physical QPs and CQs,
//! describe them in an endpoint [`Card`], and connect them to a peer's card.
//!
//! ```text
//!  Endpoint::create(pd, settings)        ── QPs in RESET, one CQ sized for them
//!  Endpoint::create_on(&[pd0, pd1], ..)  ── the same over several devices, a CQ each
//!        │ card() ──► exchange with the peer (crate::exchange) ──► peer card
//!        ▼ connect(peer)
//!  agree ─► every QP RESET→INIT ─► VirtualQp + VirtualCq ─► arm_receiver ─► RTR ─► RTS
//! ```
//! The virtual QP is built in [`Endpoint::connect`], not before, because its DQPLB
//! receiver starts at the sequence number the *peer* sends first, which only the
//! peer's card tells. The QPs are moved to INIT before [`VirtualQp::arm_receiver`]
//! so that DQPLB's zero-length receives are posted before the QPs reach RTR, i.e.
//! before any fragment of the peer can arrive.
//!
//! After `connect` returns on both sides, meet at [`crate::exchange::barrier`] before
//! sending, so that neither side sends to a QP the other has not yet moved to RTR.
//!
//! # Several devices
//! [`Endpoint::create_on`] takes one protection domain per device; the device's index
//! in vqp-core (in [`Keys`](vqp_core::Keys), in the virtual CQ) is the PD's position
//! in that slice. Data QP `i` goes on device `i % devices` — round-robin, so that the
//! core's round-robin choice of QPs spreads consecutive fragments over the devices —
//! and each device gets one CQ, sized for the QPs on it, which the [`VirtualCq`]
//! polls by device. The SPRAY notify QP goes on device 0: it carries one zero-byte
//! write per request, and a single QP keeps the notifies in order wherever it is
//! (fail-back may move it to another device with a data QP, so each of those has
//! room in its CQ for it).
//! Every device uses the same port number and GID index ([`Settings::port`],
//! [`Settings::gid_index`]); without a GID index, each RoCE port uses its own choice
//! ([`Context::default_gid_index`](crate::Context::default_gid_index): its first RoCE v2 IPv4 GID).
//!
//! The card lists one address per device and, for each QP, which address reaches it;
//! data QP `i` connects to the peer's data QP `i` at the peer's address for it. A
//! request carries one (lkey, rkey) pair per *local* device, so each local device must
//! reach exactly one device of the peer: [`Card::agree`] refuses a pairing that would
//! need two rkeys for one device. With this placement on both sides that means the
//! same number of devices, local device `d` talking to the peer's device `d`; a
//! request's `Keys` entry `d` is then (this side's lkey for the buffer in PD `d`, the
//! peer's rkey for its buffer in its PD `d`).

use vqp_core::{caps, Policy, VirtualCq, VirtualQp};
use vqp_core::{Config, PhysCq, PhysQp, PhysWc, PollFailure, PostFailure, RecvWqe, SendWqe};

use crate::card::{Capabilities, Card, PortAddr, QpAddr};
use crate::connect::{self, Path};
use crate::error::{Error, Result};
use crate::provider::{VerbsCq, VerbsQp};
use crate::verbs::{
    CompletionChannel, CompletionQueue, DeviceAttr, Gid, PortAttr, ProtectionDomain, QpCap, QpInit,
    QueuePair,
};

/// The capacities of every physical QP of a virtual QP configured as `cfg`.
fn qp_cap(cfg: &Config) -> QpCap {
    QpCap {
        max_send_wr: cfg.max_outstanding,
        max_recv_wr: cfg.recv_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// A physical QP that is never posted to: lets [`Endpoint::create`] run vqp-core's
/// own configuration checks before any verbs object exists.
struct Unposted(u32);

// The trait's posts are `unsafe fn`s (vqp-core's post contract); these bodies do no
// unsafe operation.
#[allow(unsafe_code)]
impl PhysQp for Unposted {
    fn qp_num(&self) -> u32 {
        self.0
    }
    /// Refuses every chain, touching nothing.
    unsafe fn post_send(&mut self, _: &[SendWqe]) -> Result<(), PostFailure> {
        Err(PostFailure {
            posted: 0,
            errno: libc::EINVAL,
        })
    }
    /// Refuses every chain, touching nothing.
    unsafe fn post_recv(&mut self, _: &[RecvWqe]) -> Result<(), PostFailure> {
        Err(PostFailure {
            posted: 0,
            errno: libc::EINVAL,
        })
    }
    fn set_error(&mut self) {}
}

struct NoCq;

impl PhysCq for NoCq {
    fn poll(&mut self, _: &mut [PhysWc]) -> Result<usize, PollFailure> {
        Ok(0)
    }
}

mod path;
use path::path_to;
mod rejoin;
mod settings;
mod share;

use rejoin::{Rejoin, RejoinDevice};
pub(crate) use settings::random_24bit;
pub use settings::{device_of, Settings};

/// One device of an endpoint: its CQ and what the card and the paths need of it.
struct DeviceSide {
    cq: CompletionQueue,
    port: PortAttr,
    /// The port's bandwidth in Mb/s, for the weighted policy: its effective bandwidth
    /// when the library tells it, else its speed × width.
    speed_mbps: Option<u64>,
    attr: DeviceAttr,
    gid: Gid,
    /// The local GID index its paths use: [`Settings::gid_index`], or on a RoCE port
    /// without one [`Context::default_gid_index`](crate::Context::default_gid_index)'s; `None` addresses by LID.
    gid_index: Option<u8>,
}

/// One side of a virtual QP on one or several devices, before it is connected: its
/// physical QPs (in RESET), their first PSNs, and one CQ per device.
///
/// The type parameters are the capacities, in [vqp-core's one order](vqp_core::caps):
/// those of the [`VirtualQp`] it builds (`N` data QPs at most, `D` WQEs per QP, `S`
/// requests per direction, `W` the DQPLB window), then those of its [`VirtualCq`]
/// (`DEVS`, the most devices it polls, 1 to [`MAX_DEVICES`](vqp_core::MAX_DEVICES),
/// and `B`, its poll batch); see the [module documentation](self) for how QPs are
/// placed on devices.
pub struct Endpoint<
    const N: usize = { caps::DATA_QPS },
    const D: usize = { caps::WQES },
    const S: usize = { caps::SLOTS },
    const W: usize = { caps::WINDOW },
    const DEVS: usize = { caps::DEVICES },
    const B: usize = { caps::BATCH },
> {
    settings: Settings,
    /// One per protection domain given, in order: the index is the device index.
    devices: Vec<DeviceSide>,
    /// Data QP `i` is on device `device_of(i, devices.len())`.
    data: Vec<QueuePair>,
    /// On device 0.
    notify: Option<QueuePair>,
    /// First PSN of each data QP, then of the notify QP.
    psns: Vec<u32>,
}

/// A connected virtual QP and the virtual CQ it is attached to (as its first QP).
pub struct Connected<
    const N: usize = { caps::DATA_QPS },
    const D: usize = { caps::WQES },
    const S: usize = { caps::SLOTS },
    const W: usize = { caps::WINDOW },
    const DEVS: usize = { caps::DEVICES },
    const B: usize = { caps::BATCH },
> {
    /// The virtual QP.
    pub vqp: VirtualQp<VerbsQp, N, D, S, W>,
    /// The virtual CQ polling every device's CQ.
    pub vcq: VirtualCq<VerbsCq, DEVS, B>,
    /// Device 0's CQ (to arm it with [`CompletionQueue::req_notify`] when blocking);
    /// [`Connected::device_cq`] gives any device's.
    pub cq: CompletionQueue,
    /// What fail-back needs to replace a data QP ([`Connected::offer_rejoin`]).
    rejoin: Rejoin,
}

impl<
        const N: usize,
        const D: usize,
        const S: usize,
        const W: usize,
        const DEVS: usize,
        const B: usize,
    > Connected<N, D, S, W, DEVS, B>
{
    /// The CQ of device `device` (its index in [`Endpoint::create_on`]'s slice).
    pub fn device_cq(&mut self, device: u8) -> Option<&CompletionQueue> {
        self.vcq.cq_mut(device).map(|c| c.cq())
    }
}

impl<
        const N: usize,
        const D: usize,
        const S: usize,
        const W: usize,
        const DEVS: usize,
        const B: usize,
    > Endpoint<N, D, S, W, DEVS, B>
{
    /// Creates the CQ (reporting to `channel`, if given) and the data and notify QPs
    /// in `pd`'s device, after checking `settings` the way vqp-core will.
    ///
    /// # Errors
    /// [`Error::Build`] for a configuration vqp-core refuses; [`Error::Verbs`] when a
    /// query or a creation fails; [`Error::InvalidArgument`] for a CQ too large for the
    /// verbs.
    pub fn create(
        pd: &ProtectionDomain,
        settings: &Settings,
        channel: Option<&CompletionChannel>,
    ) -> Result<Self> {
        Self::create_on(&[pd], settings, channel.as_slice())
    }

    /// Creates the QPs over several devices, one protection domain each: a CQ per
    /// device (reporting to `channels[d]` when `channels` is not empty), data QP `i`
    /// in `pds[i % pds.len()]`, the notify QP in `pds[0]`, after checking `settings`
    /// the way vqp-core will. The device index of `pds[d]` is `d`: register buffers in
    /// each PD and give a request the keys of each device in its
    /// [`Keys`](vqp_core::Keys).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no PD, more PDs than `DEVS` or than data QPs (a
    /// device would carry no data QP), a `channels` slice of the wrong length, or a CQ
    /// too large for the verbs; [`Error::Build`]/[`Error::Cq`] for a configuration
    /// vqp-core refuses; [`Error::Verbs`] when a query or a creation fails.
    pub fn create_on(
        pds: &[&ProtectionDomain],
        settings: &Settings,
        channels: &[&CompletionChannel],
    ) -> Result<Self> {
        let devs = pds.len();
        if devs == 0 {
            return Err(Error::InvalidArgument {
                what: "an endpoint needs at least one protection domain",
            });
        }
        if devs > DEVS {
            return Err(Error::InvalidArgument {
                what: "more protection domains than the endpoint type's DEVS devices",
            });
        }
        if devs > settings.data_qps {
            return Err(Error::InvalidArgument {
                what: "more protection domains than data QPs: a device would carry no data QP",
            });
        }
        if !channels.is_empty() && channels.len() != devs {
            return Err(Error::InvalidArgument {
                what: "give no completion channel or one per protection domain",
            });
        }
        Self::build(pds, settings, |d, ctx, cqe| {
            ctx.create_cq(cqe, channels.get(d).copied(), 0)
        })
    }

    /// The body of [`Endpoint::create_on`] once the arguments are checked: the CQ of
    /// device `d` comes from `make_cq(d, its context, the entries it needs)`.
    fn build(
        pds: &[&ProtectionDomain],
        settings: &Settings,
        mut make_cq: impl FnMut(usize, &crate::verbs::Context, u32) -> Result<CompletionQueue>,
    ) -> Result<Self> {
        let devs = pds.len();
        if devs == 0 || devs > DEVS || devs > settings.data_qps {
            return Err(Error::InvalidArgument {
                what: "one to DEVS protection domains, no more than data QPs",
            });
        }
        let cfg = settings.config;
        let notify = settings.has_notify();
        // vqp-core's checks, on QPs that do not exist yet.
        let probe = VirtualQp::<Unposted, N, D, S, W>::new(
            cfg,
            (0..settings.data_qps).map(|i| (Unposted(i as u32), device_of(i, devs) as u8)),
            notify.then_some((Unposted(u32::MAX), 0)),
        )?;
        let mut cqes = Vec::with_capacity(devs);
        {
            let mut vcq = VirtualCq::<NoCq, DEVS, B>::new();
            for d in 0..devs {
                let needed = settings.cq_entries_needed_on(d, devs);
                vcq.add_cq(NoCq, d as u8, u32::try_from(needed).unwrap_or(u32::MAX))?;
                let cqe = u32::try_from(needed.max(u64::from(settings.min_cq_entries))).map_err(
                    |_| Error::InvalidArgument {
                        what: "the completion queue these settings need exceeds 2^32 entries",
                    },
                )?;
                cqes.push(cqe);
            }
            let mut probe = probe;
            vcq.attach(&mut probe)?;
        }
        let mut devices = Vec::with_capacity(devs);
        for (d, pd) in pds.iter().enumerate() {
            let ctx = pd.context();
            let port = ctx.query_port(settings.port)?;
            let attr = ctx.query_device()?;
            let gid_index = match (settings.gid_index, port.needs_grh()) {
                (Some(i), _) => Some(i),
                (None, true) => Some(ctx.default_gid_index(settings.port)?),
                (None, false) => None,
            };
            let gid = match gid_index {
                Some(i) => ctx.query_gid(settings.port, u32::from(i))?,
                None => Gid::default(),
            };
            let cq = make_cq(d, &ctx, cqes[d])?;
            let speed_mbps = ctx
                .query_port_speed(settings.port)
                .or_else(|| port.rate_mbps());
            devices.push(DeviceSide {
                cq,
                port,
                speed_mbps,
                attr,
                gid,
                gid_index,
            });
        }
        let cap = qp_cap(&cfg);
        let data = (0..settings.data_qps)
            .map(|i| {
                let d = device_of(i, devs);
                pds[d].create_qp(&QpInit::rc(&devices[d].cq, cap))
            })
            .collect::<Result<Vec<_>>>()?;
        let notify = if notify {
            Some(pds[0].create_qp(&QpInit::rc(&devices[0].cq, cap))?)
        } else {
            None
        };
        let psns = (0..data.len() + usize::from(notify.is_some()))
            .map(|_| random_24bit())
            .collect();
        Ok(Endpoint {
            settings: *settings,
            devices,
            data,
            notify,
            psns,
        })
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Device 0's CQ (the only one of a single-device endpoint).
    pub fn cq(&self) -> &CompletionQueue {
        &self.devices[0].cq
    }

    /// The number of devices the QPs are spread over.
    pub fn devices(&self) -> usize {
        self.devices.len()
    }

    /// The CQ of device `device`.
    pub fn device_cq(&self, device: usize) -> Option<&CompletionQueue> {
        self.devices.get(device).map(|d| &d.cq)
    }

    /// The device data QP `i` is on.
    pub fn data_qp_device(&self, i: usize) -> usize {
        device_of(i, self.devices.len())
    }

    /// The local GID index the paths from device `device` use: [`Settings::gid_index`],
    /// or on a RoCE port without one, the port's
    /// [`default_gid_index`](crate::Context::default_gid_index); `None` when they
    /// address by LID, or for a device this endpoint does not have.
    pub fn gid_index(&self, device: usize) -> Option<u8> {
        self.devices.get(device).and_then(|d| d.gid_index)
    }

    /// This side's card, to send to the peer: one port address per device, data QP
    /// `i` at its device's.
    pub fn card(&self) -> Card {
        let cfg = &self.settings.config;
        let addr = |qp: &QueuePair, psn: u32, device: usize| QpAddr {
            qpn: qp.qp_num(),
            psn,
            port: device as u8,
        };
        Card {
            mode: cfg.mode,
            caps: Capabilities::supported(),
            required: self.settings.required(),
            max_frag: cfg.split.max_frag,
            max_outstanding: cfg.max_outstanding,
            recv_depth: cfg.recv_depth,
            window: u32::try_from(W).unwrap_or(u32::MAX),
            init_seq: cfg.send_seq & connect::MAX_24BIT,
            ports: self
                .devices
                .iter()
                .map(|d| PortAddr {
                    mtu: d
                        .port
                        .active_mtu()
                        .bytes()
                        .and_then(|b| u16::try_from(b).ok())
                        .unwrap_or(0),
                    lid: d.port.lid(),
                    gid: d.gid,
                })
                .collect(),
            data: self
                .data
                .iter()
                .zip(&self.psns)
                .enumerate()
                .map(|(i, (qp, &psn))| addr(qp, psn, self.data_qp_device(i)))
                .collect(),
            notify: self
                .notify
                .as_ref()
                .map(|qp| addr(qp, self.psns[self.data.len()], 0)),
        }
    }

    /// The path from the local QP on `device` whose first PSN is `local_psn` to the
    /// peer QP `remote`, limited to the local port and device and the peer's MTU.
    fn path(&self, device: usize, peer: &Card, remote: QpAddr, local_psn: u32) -> Result<Path> {
        let local = &self.devices[device];
        path_to(
            &self.settings,
            local.gid_index,
            &local.port,
            &local.attr,
            peer,
            remote,
            local_psn,
        )
    }

    /// Checks `peer` against this side's card, then connects every QP to its
    /// counterpart and builds the virtual QP and CQ: INIT, the virtual QP (its DQPLB
    /// receiver starting at the peer's first sequence number), its receives armed,
    /// RTR, RTS.
    ///
    /// # Errors
    /// [`Error::Card`] when the peer's card is malformed or does not agree;
    /// [`Error::Verbs`] naming the transition that failed; [`Error::Build`]/
    /// [`Error::Cq`] if vqp-core refuses (which [`Endpoint::create_on`]'s checks make
    /// unexpected).
    pub fn connect(self, peer: &Card) -> Result<Connected<N, D, S, W, DEVS, B>> {
        let (vqp, vcq, rejoin) = self.connect_with(peer, |vqp, devices| {
            let mut vcq = VirtualCq::new();
            for (d, dev) in devices.iter().enumerate() {
                vcq.add_cq(
                    VerbsCq::with_batch(dev.cq.clone(), B),
                    d as u8,
                    dev.cq.capacity(),
                )?;
            }
            vcq.attach(vqp)?;
            Ok(vcq)
        })?;
        let cq = rejoin.devices[0].cq.clone();
        Ok(Connected {
            vqp,
            vcq,
            cq,
            rejoin,
        })
    }

    /// The body of [`Endpoint::connect`]: the QPs to INIT, the virtual QP built and
    /// handed to `attach` (which attaches it to a virtual CQ over this endpoint's CQs,
    /// before anything is posted, so every wr_id carries its tag), then the receiver
    /// armed and the QPs to RTS. Returns the virtual QP, what `attach` made, and what
    /// fail-back needs.
    #[allow(clippy::type_complexity)]
    fn connect_with<T>(
        self,
        peer: &Card,
        attach: impl FnOnce(&mut VirtualQp<VerbsQp, N, D, S, W>, &[DeviceSide]) -> Result<T>,
    ) -> Result<(VirtualQp<VerbsQp, N, D, S, W>, T, Rejoin)> {
        peer.validate()?;
        self.card().agree(peer)?;
        let n = self.data.len();
        let devs = self.devices.len();
        let mut paths = Vec::with_capacity(n + 1);
        for (i, &remote) in peer.data.iter().enumerate() {
            paths.push(self.path(device_of(i, devs), peer, remote, self.psns[i])?);
        }
        if let (Some(_), Some(remote)) = (&self.notify, peer.notify) {
            paths.push(self.path(0, peer, remote, self.psns[n])?);
        }
        for (qp, path) in self.data.iter().chain(self.notify.iter()).zip(&paths) {
            connect::to_init(qp, path)?;
        }
        let mut cfg = Config {
            recv_seq: peer.init_seq,
            ..self.settings.config
        };
        if cfg.policy == Policy::Weighted && self.settings.weights_from_ports {
            for (w, d) in cfg.weights.iter_mut().zip(&self.devices) {
                if let Some(mbps) = d.speed_mbps {
                    *w = u32::try_from(mbps).unwrap_or(u32::MAX);
                }
            }
        }
        let settings = self.settings;
        let cap = qp_cap(&self.settings.config);
        let Endpoint {
            devices,
            data,
            notify,
            ..
        } = self;
        let mut vqp = VirtualQp::new(
            cfg,
            data.into_iter()
                .enumerate()
                .map(|(i, qp)| (VerbsQp::new(qp), device_of(i, devs) as u8)),
            notify.map(|qp| (VerbsQp::new(qp), 0)),
        )?;
        let made = attach(&mut vqp, &devices)?;
        vqp.arm_receiver();
        for (i, path) in paths.iter().enumerate() {
            let qp = if i < n {
                vqp.data_qp(i)
            } else {
                vqp.notify_qp_mut().map(|q| &*q)
            };
            if let Some(qp) = qp {
                connect::to_rtr(qp.qp(), path)?;
                connect::to_rts(qp.qp(), path)?;
            }
        }
        let devices = devices
            .into_iter()
            .map(|d| RejoinDevice {
                cq: d.cq,
                port: d.port,
                attr: d.attr,
                gid_index: d.gid_index,
            })
            .collect();
        Ok((vqp, made, Rejoin::new(settings, devices, peer.clone(), cap)))
    }
}

impl<
        const N: usize,
        const D: usize,
        const S: usize,
        const W: usize,
        const DEVS: usize,
        const B: usize,
    > core::fmt::Debug for Endpoint<N, D, S, W, DEVS, B>
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Endpoint")
            .field("settings", &self.settings)
            .field("devices", &self.devices.len())
            .field("data", &self.data)
            .field("notify", &self.notify)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vqp_core::Mode;

    #[test]
    fn sizes_and_helpers() {
        let s = Settings::new(Config::new(Mode::Spray), 4);
        assert!(s.has_notify());
        assert_eq!(s.cq_entries_needed(), 5 * (64 + 64));
        assert!(s.config.send_seq <= connect::MAX_24BIT);
        let d = Settings::new(Config::new(Mode::Dqplb), 4);
        assert!(!d.has_notify());
        assert_eq!(d.cq_entries_needed(), 4 * 128);
        assert!((0..100)
            .map(|_| random_24bit())
            .all(|x| x <= connect::MAX_24BIT));
    }

    #[test]
    fn qps_spread_round_robin_and_cqs_are_sized_per_device() {
        assert_eq!(
            (0..5).map(|i| device_of(i, 2)).collect::<Vec<_>>(),
            [0, 1, 0, 1, 0]
        );
        assert_eq!(device_of(3, 1), 0);
        assert_eq!(device_of(3, 0), 0, "no devices is treated as one");
        // SPRAY, 5 data QPs over 2 devices: 3 + notify on device 0, 2 on device 1,
        // and room there for the notify QP, which fail-back may move there.
        let s = Settings::new(Config::new(Mode::Spray), 5);
        let per_qp = 64 + 64;
        assert_eq!(s.cq_entries_needed_on(0, 2), 4 * per_qp);
        assert_eq!(s.cq_entries_needed_on(1, 2), 3 * per_qp);
        assert_eq!(s.cq_entries_needed_on(2, 2), 0);
        assert_eq!(s.cq_entries_needed_on(0, 1), s.cq_entries_needed());
        // DQPLB has no notify QP: 4 over 4 devices is one each.
        let d = Settings::new(Config::new(Mode::Dqplb), 4);
        for dev in 0..4 {
            assert_eq!(d.cq_entries_needed_on(dev, 4), 128);
        }
        // Over 3 devices the notify QP has room on each.
        let total: u64 = (0..3).map(|dev| s.cq_entries_needed_on(dev, 3)).sum();
        assert_eq!(total, s.cq_entries_needed() + 2 * per_qp);
    }
}
