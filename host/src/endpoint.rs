//! Building a virtual QP on one device: create its physical QPs and CQ, describe them
//! in an endpoint [`Card`], and connect them to a peer's card.
//!
//! ```text
//!  Endpoint::create(pd, settings) ── QPs in RESET, one CQ sized for them
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

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use vqp_core::{Config, Mode, PhysCq, PhysQp, PhysWc, PollFailure, PostFailure, RecvWqe, SendWqe};
use vqp_core::{VirtualCq, VirtualQp};

use crate::card::{Capabilities, Card, QpAddr};
use crate::connect::{self, Address, Path};
use crate::enums::Mtu;
use crate::error::{Error, Result};
use crate::provider::{VerbsCq, VerbsQp};
use crate::verbs::{
    CompletionChannel, CompletionQueue, DeviceAttr, Gid, PortAttr, ProtectionDomain, QpCap, QpInit,
    QueuePair,
};

/// What [`Endpoint::create`] builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The virtual QP's configuration. `recv_seq` is ignored: the peer's card sets it.
    pub config: Config,
    /// Number of data QPs (1 to the virtual QP type's `N`).
    pub data_qps: usize,
    /// Local port (from 1).
    pub port: u8,
    /// Local GID index to address the peer by GID. `None` addresses by LID on
    /// InfiniBand and uses GID index 0 on Ethernet (RoCE) ports, which need a GID.
    pub gid_index: Option<u8>,
    /// Completion queue entries to ask for at least; the CQ is never smaller than
    /// every WQE its QPs can have outstanding, which is what vqp-core requires.
    pub min_cq_entries: u32,
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
        }
    }

    /// Whether this set-up has a SPRAY notify QP.
    pub fn has_notify(&self) -> bool {
        self.config.mode == Mode::Spray && self.data_qps > 1
    }

    /// Completion queue entries vqp-core requires: every data and notify QP's send and
    /// receive depth.
    pub fn cq_entries_needed(&self) -> u64 {
        let qps = self.data_qps as u64 + u64::from(self.has_notify());
        qps * (u64::from(self.config.max_outstanding) + u64::from(self.config.recv_depth))
    }
}

/// A random 24-bit number (a PSN or a first sequence number), from the standard
/// library's per-process random hash keys.
fn random_24bit() -> u32 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    (h.finish() as u32) & connect::MAX_24BIT
}

/// The MTU whose size in bytes is `bytes`, if it is one.
fn mtu_from_bytes(bytes: u16) -> Option<Mtu> {
    Some(match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => return None,
    })
}

/// A physical QP that is never posted to: lets [`Endpoint::create`] run vqp-core's
/// own configuration checks before any verbs object exists.
struct Unposted(u32);

impl PhysQp for Unposted {
    fn qp_num(&self) -> u32 {
        self.0
    }
    fn post_send(&mut self, _: &[SendWqe]) -> Result<(), PostFailure> {
        Err(PostFailure {
            posted: 0,
            errno: libc::EINVAL,
        })
    }
    fn post_recv(&mut self, _: &[RecvWqe]) -> Result<(), PostFailure> {
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

/// One side of a virtual QP on a device, before it is connected: its physical QPs (in
/// RESET), their first PSNs, and the CQ they share.
///
/// The type parameters are those of the [`VirtualQp`] it builds (`N` data QPs at
/// most, `D` WQEs per QP, `S` requests per direction, `W` the DQPLB window) and `B`,
/// the [`VirtualCq`]'s poll batch.
pub struct Endpoint<
    const N: usize = 8,
    const D: usize = 128,
    const S: usize = 512,
    const W: usize = 1024,
    const B: usize = 32,
> {
    settings: Settings,
    cq: CompletionQueue,
    data: Vec<QueuePair>,
    notify: Option<QueuePair>,
    /// First PSN of each data QP, then of the notify QP.
    psns: Vec<u32>,
    port: PortAttr,
    device: DeviceAttr,
    gid: Gid,
}

/// A connected virtual QP and the virtual CQ it is attached to (as its first QP).
pub struct Connected<
    const N: usize = 8,
    const D: usize = 128,
    const S: usize = 512,
    const W: usize = 1024,
    const B: usize = 32,
> {
    /// The virtual QP.
    pub vqp: VirtualQp<VerbsQp, N, D, S, W>,
    /// The virtual CQ polling the device's CQ.
    pub vcq: VirtualCq<VerbsCq, 1, B>,
    /// The device CQ (to arm it with [`CompletionQueue::req_notify`] when blocking).
    pub cq: CompletionQueue,
}

impl<const N: usize, const D: usize, const S: usize, const W: usize, const B: usize>
    Endpoint<N, D, S, W, B>
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
        let cfg = settings.config;
        let notify = settings.has_notify();
        // vqp-core's checks, on QPs that do not exist yet.
        let probe = VirtualQp::<Unposted, N, D, S, W>::new(
            cfg,
            (0..settings.data_qps).map(|i| (Unposted(i as u32), 0)),
            notify.then_some((Unposted(u32::MAX), 0)),
        )?;
        let needed = settings.cq_entries_needed();
        {
            let mut vcq = VirtualCq::<NoCq, 1, B>::new();
            let cqe = u32::try_from(needed).unwrap_or(u32::MAX);
            vcq.add_cq(NoCq, 0, cqe)?;
            let mut probe = probe;
            vcq.attach(&mut probe)?;
        }
        let cqe = u32::try_from(needed.max(u64::from(settings.min_cq_entries))).map_err(|_| {
            Error::InvalidArgument {
                what: "the completion queue these settings need exceeds 2^32 entries",
            }
        })?;
        let ctx = pd.context();
        let port = ctx.query_port(settings.port)?;
        let device = ctx.query_device()?;
        let gid = match (settings.gid_index, port.needs_grh()) {
            (Some(i), _) => ctx.query_gid(settings.port, u32::from(i))?,
            (None, true) => ctx.query_gid(settings.port, 0)?,
            (None, false) => Gid::default(),
        };
        let cq = ctx.create_cq(cqe, channel, 0)?;
        let cap = QpCap {
            max_send_wr: cfg.max_outstanding,
            max_recv_wr: cfg.recv_depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInit::rc(&cq, cap);
        let data = (0..settings.data_qps)
            .map(|_| pd.create_qp(&init))
            .collect::<Result<Vec<_>>>()?;
        let notify = if notify {
            Some(pd.create_qp(&init)?)
        } else {
            None
        };
        let psns = (0..data.len() + usize::from(notify.is_some()))
            .map(|_| random_24bit())
            .collect();
        Ok(Endpoint {
            settings: *settings,
            cq,
            data,
            notify,
            psns,
            port,
            device,
            gid,
        })
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The CQ the QPs share.
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// This side's card, to send to the peer.
    pub fn card(&self) -> Card {
        let cfg = &self.settings.config;
        let addr = |qp: &QueuePair, psn: u32| QpAddr {
            qpn: qp.qp_num(),
            psn,
        };
        Card {
            mode: cfg.mode,
            caps: Capabilities::supported(),
            required: Capabilities::required_for(cfg.mode),
            max_frag: cfg.split.max_frag,
            max_outstanding: cfg.max_outstanding,
            recv_depth: cfg.recv_depth,
            window: u32::try_from(W).unwrap_or(u32::MAX),
            init_seq: cfg.send_seq & connect::MAX_24BIT,
            mtu: self
                .port
                .active_mtu()
                .bytes()
                .and_then(|b| u16::try_from(b).ok())
                .unwrap_or(0),
            lid: self.port.lid(),
            gid: self.gid,
            data: self
                .data
                .iter()
                .zip(&self.psns)
                .map(|(qp, &psn)| addr(qp, psn))
                .collect(),
            notify: self
                .notify
                .as_ref()
                .map(|qp| addr(qp, self.psns[self.data.len()])),
        }
    }

    /// The path to the peer QP `remote`, from the local QP whose first PSN is
    /// `local_psn`, limited to the port, the device and the peer's MTU.
    fn path(&self, peer: &Card, remote: QpAddr, local_psn: u32) -> Path {
        let s = &self.settings;
        let address = match (s.gid_index, self.port.needs_grh()) {
            (Some(i), _) => Address::gid(peer.gid, i),
            (None, true) => Address::gid(peer.gid, 0),
            (None, false) => Address::lid(peer.lid),
        };
        let mut path = Path::new(s.port, address, remote.qpn, local_psn, remote.psn)
            .limit_to(&self.port, &self.device);
        if let Some(theirs) = mtu_from_bytes(peer.mtu) {
            path.mtu = path.mtu.min(theirs);
        }
        path
    }

    /// Checks `peer` against this side's card, then connects every QP to its
    /// counterpart and builds the virtual QP and CQ: INIT, the virtual QP (its DQPLB
    /// receiver starting at the peer's first sequence number), its receives armed,
    /// RTR, RTS.
    ///
    /// # Errors
    /// [`Error::Card`] when the cards do not agree; [`Error::Verbs`] naming the
    /// transition that failed; [`Error::Build`]/[`Error::Cq`] if vqp-core refuses
    /// (which [`Endpoint::create`]'s checks make unexpected).
    pub fn connect(self, peer: &Card) -> Result<Connected<N, D, S, W, B>> {
        self.card().agree(peer)?;
        let n = self.data.len();
        let mut paths: Vec<Path> = self
            .data
            .iter()
            .enumerate()
            .map(|(i, _)| self.path(peer, peer.data[i], self.psns[i]))
            .collect();
        if let (Some(_), Some(remote)) = (&self.notify, peer.notify) {
            paths.push(self.path(peer, remote, self.psns[n]));
        }
        for (qp, path) in self.data.iter().chain(self.notify.iter()).zip(&paths) {
            connect::to_init(qp, path)?;
        }
        let cfg = Config {
            recv_seq: peer.init_seq,
            ..self.settings.config
        };
        let Endpoint {
            cq, data, notify, ..
        } = self;
        let mut vqp = VirtualQp::new(
            cfg,
            data.into_iter().map(|qp| (VerbsQp::new(qp), 0)),
            notify.map(|qp| (VerbsQp::new(qp), 0)),
        )?;
        let mut vcq = VirtualCq::new();
        vcq.add_cq(VerbsCq::with_batch(cq.clone(), B), 0, cq.capacity())?;
        vcq.attach(&mut vqp)?;
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
        Ok(Connected { vqp, vcq, cq })
    }
}

impl<const N: usize, const D: usize, const S: usize, const W: usize, const B: usize>
    core::fmt::Debug for Endpoint<N, D, S, W, B>
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Endpoint")
            .field("settings", &self.settings)
            .field("data", &self.data)
            .field("notify", &self.notify)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_helpers() {
        let s = Settings::new(Config::new(Mode::Spray), 4);
        assert!(s.has_notify());
        assert_eq!(s.cq_entries_needed(), 5 * (64 + 64));
        assert!(s.config.send_seq <= connect::MAX_24BIT);
        let d = Settings::new(Config::new(Mode::Dqplb), 4);
        assert!(!d.has_notify());
        assert_eq!(d.cq_entries_needed(), 4 * 128);
        assert_eq!(mtu_from_bytes(2048), Some(Mtu::Mtu2048));
        assert_eq!(mtu_from_bytes(1500), None);
        assert!((0..100)
            .map(|_| random_24bit())
            .all(|x| x <= connect::MAX_24BIT));
    }
}
