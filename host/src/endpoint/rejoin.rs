//! Fail-back on a [`Connected`] virtual QP: a failed data QP, or SPRAY's notify QP,
//! replaced by a fresh one, connected to the peer's fresh one through the three
//! [`FailBack`] messages (see [`crate::failback`] for the protocol). The application
//! carries the messages over its side channel; this side makes, connects and hands
//! the QPs to vqp-core ([`VirtualQp::rejoin`](vqp_core::VirtualQp::rejoin), then
//! [`resume`](vqp_core::VirtualQp::resume); `rejoin_notify` and `resume_notify` for
//! the notify QP).

use super::{path_to, Connected, Settings};
use crate::card::{Capabilities, Card, QpAddr};
use crate::connect::{self, Path};
use crate::enums::PortState;
use crate::error::{Error, Result};
use crate::failback::{first_psn, notify_lane, notify_port, FailBack, FailBackError, NOTIFY_QP};
use crate::provider::VerbsQp;
use crate::verbs::{CompletionQueue, DeviceAttr, PortAttr, QpCap, QpInit};
use vqp_core::RestoreError;

/// Where fail-back of one data QP stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Nothing under way.
    Idle,
    /// This side offered its replacement (QP number `qpn`) and waits for the answer.
    Offered { qpn: u32 },
    /// This side answered the peer's offer and waits for Ready; the peer's old
    /// notify QP received `peer_seen` of this side's notifies (0 for a data QP).
    Answered { peer_seen: u32 },
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Idle => "not being replaced",
            Step::Offered { .. } => "offered",
            Step::Answered { .. } => "answered",
        }
    }
}

/// One device as fail-back needs it: a replacement QP goes on its CQ, its path is
/// limited to its port.
pub(super) struct RejoinDevice {
    pub cq: CompletionQueue,
    pub port: PortAttr,
    pub attr: DeviceAttr,
    /// The local GID index of its paths (`None`: by LID).
    pub gid_index: Option<u8>,
}

/// What a connected virtual QP keeps to replace its QPs: one step and one retired QP
/// per data QP, then the notify QP's.
pub(super) struct Rejoin {
    pub settings: Settings,
    pub devices: Vec<RejoinDevice>,
    pub peer: Card,
    pub cap: QpCap,
    steps: Vec<Step>,
    /// The QP each data QP's replacement took the place of, kept until the next
    /// replacement so that its flushed completions still find their QP (one per data
    /// QP at most).
    retired: Vec<Option<VerbsQp>>,
}

impl Rejoin {
    pub fn new(settings: Settings, devices: Vec<RejoinDevice>, peer: Card, cap: QpCap) -> Self {
        let n = peer.data.len() + 1;
        Rejoin {
            settings,
            devices,
            peer,
            cap,
            steps: vec![Step::Idle; n],
            retired: (0..n).map(|_| None).collect(),
        }
    }
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
    /// Starts fail-back of data QP `i` (normally one that failed,
    /// [`VirtualQp::data_qp_failed`](vqp_core::VirtualQp::data_qp_failed)), or of the
    /// notify QP for `i` = [`NOTIFY_QP`]
    /// ([`VirtualQp::notify_qp_failed`](vqp_core::VirtualQp::notify_qp_failed)): the
    /// old QP is taken out if it still ran, and once the application's receives on it
    /// have all completed, a fresh QP on its device, in INIT with its receives posted
    /// (those that did not complete first), takes its place; returns the Offer to
    /// send to the peer. Offering again while an offer is unanswered replaces the
    /// offered QP.
    ///
    /// # Errors
    /// [`Error::FailBack`] when the peer's card lacks fail-back or there is no such
    /// QP; [`Error::Restore`] when vqp-core refuses: with
    /// [`RestoreError::NotDrained`] while the old
    /// QP's receives are still flushing (keep polling, offer again), or because
    /// re-dispatch is off, the virtual QP failed, or it is the last path with no
    /// grace period; [`Error::Verbs`] when the QP cannot be made.
    pub fn offer_rejoin(&mut self, i: usize) -> Result<FailBack> {
        if !self.rejoin.peer.caps.contains(Capabilities::FAIL_BACK) {
            return Err(FailBackError::PeerLacks.into());
        }
        let at = self.index_of(i)?;
        let seen = self.take_out(at)?;
        let qpn = self.replace(at)?;
        self.rejoin.steps[at] = Step::Offered { qpn };
        let m = FailBack::Offer {
            lane: self.lane_of(at),
            qpn,
            seen,
        };
        m.check()?;
        Ok(m)
    }

    /// Whether the port data QP `i` uses is active (`ibv_query_port`: a call into the
    /// library, for the control path). A replacement over a port that is down would
    /// only fail again. [`NOTIFY_QP`] asks about the notify QP's port.
    ///
    /// # Errors
    /// [`Error::FailBack`] for no data QP `i`; [`Error::Verbs`] when the query fails.
    pub fn port_active(&self, i: usize) -> Result<bool> {
        let i = self.index_of(i)?;
        self.device_active(self.device_for_replacement(i))
    }

    /// Whether fail-back of data QP `i` ([`NOTIFY_QP`]: of the notify QP) is under
    /// way: offered or answered, and not yet carrying traffic on this side.
    pub fn rejoining(&self, i: usize) -> bool {
        self.index_of(i)
            .is_ok_and(|i| self.rejoin.steps.get(i).is_some_and(|s| *s != Step::Idle))
    }

    /// Takes a fail-back message from the peer; returns the one to send back, if any:
    /// an Offer is answered (or refused, when vqp-core cannot take the replacement
    /// now: this side's old QP is then taken out, and its receives flush while the
    /// peer offers again), an Answer makes this side's replacement carry traffic and
    /// is followed by Ready, a Ready makes it carry traffic here, a Refuse leaves the
    /// offered QP failed. An Offer crossing this side's own for the same QP is
    /// ignored when this side's QP number is lower (on a tie, its first sequence
    /// number): the peer takes it instead.
    ///
    /// # Errors
    /// [`Error::FailBack`] for a message about no such QP or that does not follow
    /// from where that QP stands (nothing changed); [`Error::Verbs`] when a QP
    /// cannot be made or connected (that QP stays failed).
    pub fn on_failback(&mut self, m: FailBack) -> Result<Option<FailBack>> {
        m.check()?;
        let i = self.index_of(usize::from(m.lane()))?;
        // How Ready and Refuse name the QP.
        let lane = if i == self.notify_index() {
            NOTIFY_QP
        } else {
            i as u8
        };
        // The port of the peer's replacement, for a notify QP's (its data QP's own
        // otherwise).
        let peer_port = notify_port(m.lane()).filter(|_| i == self.notify_index());
        let step = self.rejoin.steps[i];
        let unexpected = || -> Error {
            FailBackError::Unexpected {
                message: m,
                state: step.name(),
            }
            .into()
        };
        match m {
            FailBack::Offer { qpn, seen, .. } => {
                let cfg = self.vqp.config();
                let (mine, seen_here) = match step {
                    Step::Offered { qpn: mq } if (mq, cfg.send_seq) < (qpn, cfg.recv_seq) => {
                        return Ok(None);
                    }
                    // Our offer lost (or crossed an equal one): our offered QP, in
                    // INIT with its receives posted, answers theirs; our count was
                    // final when we offered it.
                    Step::Offered { qpn: mq } => (mq, self.seen_at(i)?),
                    Step::Idle | Step::Answered { .. } => {
                        let seen_here = match self.take_out(i) {
                            Ok(n) => n,
                            Err(Error::Restore(_)) => return Ok(Some(FailBack::Refuse { lane })),
                            Err(e) => return Err(e),
                        };
                        match self.replace(i) {
                            Ok(made) => (made, seen_here),
                            Err(Error::Restore(_)) => return Ok(Some(FailBack::Refuse { lane })),
                            Err(e) => return Err(e),
                        }
                    }
                };
                self.connect_lane(i, qpn, mine, peer_port)?;
                self.rejoin.steps[i] = Step::Answered { peer_seen: seen };
                Ok(Some(FailBack::Answer {
                    lane: self.lane_of(i),
                    qpn: mine,
                    seen: seen_here,
                }))
            }
            FailBack::Answer { qpn, seen, .. } => {
                let Step::Offered { qpn: mine } = step else {
                    return Err(unexpected());
                };
                self.connect_lane(i, qpn, mine, peer_port)?;
                self.resume(i, seen)?;
                self.rejoin.steps[i] = Step::Idle;
                Ok(Some(FailBack::Ready { lane }))
            }
            FailBack::Ready { .. } => {
                let Step::Answered { peer_seen } = step else {
                    return Err(unexpected());
                };
                self.resume(i, peer_seen)?;
                self.rejoin.steps[i] = Step::Idle;
                Ok(None)
            }
            FailBack::Refuse { .. } => {
                if !matches!(step, Step::Offered { .. }) {
                    return Err(unexpected());
                }
                self.rejoin.steps[i] = Step::Idle;
                Ok(None)
            }
        }
    }

    /// Where the notify QP's step and retired QP are kept: after the data QPs'.
    fn notify_index(&self) -> usize {
        self.rejoin.steps.len() - 1
    }

    fn lane_index(&self, i: usize) -> Result<()> {
        let data_qps = self.vqp.data_qps();
        if i >= data_qps || i >= self.notify_index() {
            return Err(FailBackError::NoSuchQp {
                lane: u8::try_from(i).unwrap_or(u8::MAX),
                data_qps,
            }
            .into());
        }
        Ok(())
    }

    /// The index of the step kept for lane `lane` as messages name it: a data QP's
    /// own, or the notify QP's for [`NOTIFY_QP`] (and the lanes [`notify_lane`]
    /// gives).
    fn index_of(&self, lane: usize) -> Result<usize> {
        if u8::try_from(lane).ok().and_then(notify_port).is_some() {
            if self.vqp.notify_qp().is_none() || self.rejoin.peer.notify.is_none() {
                return Err(FailBackError::NoNotifyQp.into());
            }
            return Ok(self.notify_index());
        }
        self.lane_index(lane)?;
        Ok(lane)
    }

    /// The lane messages name the QP in place `i` by: a data QP's index, or for the
    /// notify QP the lane that says its device's port ([`notify_lane`]).
    fn lane_of(&self, i: usize) -> u8 {
        if i == self.notify_index() {
            notify_lane(self.vqp.notify_qp_device().unwrap_or(0))
        } else {
            i as u8
        }
    }

    /// One of the virtual QP's QPs on device `device`, if it has one there.
    fn qp_on(&self, device: u8) -> Option<&VerbsQp> {
        (0..self.vqp.data_qps())
            .find(|&j| self.vqp.data_qp_device(j) == Some(device))
            .and_then(|j| self.vqp.data_qp(j))
            .or_else(|| {
                self.vqp
                    .notify_qp()
                    .filter(|_| self.vqp.notify_qp_device() == Some(device))
            })
    }

    /// Whether device `device`'s port is active (asked through one of the virtual
    /// QP's QPs there).
    fn device_active(&self, device: u8) -> Result<bool> {
        let Some(qp) = self.qp_on(device) else {
            return Ok(false);
        };
        let port = qp.qp().context().query_port(self.rejoin.settings.port)?;
        Ok(port.state() == PortState::Active)
    }

    /// The device a notify QP's replacement goes on: the old one's while its port is
    /// active, else the first device with a data QP whose port is.
    fn notify_device_to_use(&self) -> u8 {
        let now = self.vqp.notify_qp_device().unwrap_or(0);
        if self.device_active(now).unwrap_or(false) {
            return now;
        }
        (0..self.vqp.data_qps())
            .filter_map(|j| self.vqp.data_qp_device(j))
            .find(|&d| self.device_active(d).unwrap_or(false))
            .unwrap_or(now)
    }

    /// The QP in place `i` (a data QP, or the notify QP past them).
    fn qp_at(&self, i: usize) -> Option<&VerbsQp> {
        if i == self.notify_index() {
            self.vqp.notify_qp()
        } else {
            self.vqp.data_qp(i)
        }
    }

    /// Takes the QP in place `i` out if it still runs (the pair is replaced whole),
    /// and returns its count of the peer's receive-consuming WQEs once final.
    fn take_out(&mut self, i: usize) -> Result<u32> {
        if i == self.notify_index() {
            if !self.vqp.notify_qp_failed() && !self.vqp.retire_notify() {
                return Err(Error::Restore(RestoreError::Unavailable(i)));
            }
        } else if !self.vqp.retire(i) {
            return Err(Error::Restore(RestoreError::Unavailable(i)));
        }
        self.seen_at(i)
    }

    /// The final count of the QP in place `i` (see [`Self::take_out`]).
    fn seen_at(&self, i: usize) -> Result<u32> {
        let seen = if i == self.notify_index() {
            self.vqp.notifies_seen()
        } else {
            self.vqp.receives_seen(i)
        };
        seen.ok_or(Error::Restore(RestoreError::NotDrained))
    }

    /// The QP in place `i` carries traffic again: the peer's is ready, and received
    /// `peer_seen` of this side's receive-consuming WQEs on the old one.
    fn resume(&mut self, i: usize, peer_seen: u32) -> Result<()> {
        let resumed = if i == self.notify_index() {
            self.vqp.resume_notify(peer_seen)
        } else {
            self.vqp.resume_seen(i, peer_seen)
        };
        resumed.map_err(Error::Restore)
    }

    /// The device of the QP in place `i` now.
    fn device_at(&self, i: usize) -> u8 {
        let device = if i == self.notify_index() {
            self.vqp.notify_qp_device()
        } else {
            self.vqp.data_qp_device(i)
        };
        device.unwrap_or(0)
    }

    /// The device a replacement of the QP in place `i` goes on: its own, or for the
    /// notify QP the one [`Self::notify_device_to_use`] picks.
    fn device_for_replacement(&self, i: usize) -> u8 {
        if i == self.notify_index() {
            self.notify_device_to_use()
        } else {
            self.device_at(i)
        }
    }

    /// The peer's address for its QP in place `i` (from its card).
    fn peer_addr(&self, i: usize) -> Result<QpAddr> {
        let peer = &self.rejoin.peer;
        let addr = if i == self.notify_index() {
            peer.notify
        } else {
            peer.data.get(i).copied()
        };
        Ok(addr.ok_or(FailBackError::NoNotifyQp)?)
    }

    /// The path from a QP on `device` whose first PSN is `local_psn` to `remote`.
    fn path(&self, device: u8, remote: QpAddr, local_psn: u32) -> Result<Path> {
        let r = &self.rejoin;
        let dev = &r.devices[usize::from(device)];
        path_to(
            &r.settings,
            dev.gid_index,
            &dev.port,
            &dev.attr,
            &r.peer,
            remote,
            local_psn,
        )
    }

    /// A fresh QP on [`Self::device_for_replacement`], in INIT, handed to vqp-core in its
    /// place (receives posted, not sending); the old one is kept until the next
    /// replacement. Returns the new QP's number (its first PSN follows from it).
    fn replace(&mut self, i: usize) -> Result<u32> {
        let notify = i == self.notify_index();
        let device = self.device_for_replacement(i);
        let Some(there) = self.qp_on(device) else {
            return Err(FailBackError::NoSuchQp {
                lane: u8::try_from(i).unwrap_or(u8::MAX),
                data_qps: self.vqp.data_qps(),
            }
            .into());
        };
        let pd = there.qp().pd();
        let remote = self.peer_addr(i)?;
        let r = &self.rejoin;
        let qp = pd.create_qp(&QpInit::rc(&r.devices[usize::from(device)].cq, r.cap))?;
        let qpn = qp.qp_num();
        let path = self.path(device, remote, first_psn(qpn))?;
        connect::to_init(&qp, &path)?;
        let qp = VerbsQp::new(qp);
        let old = if notify {
            self.vqp.rejoin_notify_on(qp, device)
        } else {
            self.vqp.rejoin(i, qp)
        }
        .map_err(Error::Restore)?;
        self.rejoin.retired[i] = Some(old);
        Ok(qpn)
    }

    /// The replacement in place `i` (QP number `mine`), in INIT, to RTR and RTS
    /// towards the peer's replacement `qpn`, on the peer's port `peer_port` when
    /// given (a notify QP's), else where the peer's old QP was.
    fn connect_lane(&mut self, i: usize, qpn: u32, mine: u32, peer_port: Option<u8>) -> Result<()> {
        let peer = self.peer_addr(i)?;
        let remote = QpAddr {
            qpn,
            psn: first_psn(qpn),
            port: peer_port.unwrap_or(peer.port),
        };
        let path = self.path(self.device_at(i), remote, first_psn(mine))?;
        let qp = match self.qp_at(i) {
            Some(q) if q.qp().qp_num() == mine => q.qp(),
            _ => {
                return Err(FailBackError::Unexpected {
                    message: FailBack::Answer {
                        lane: u8::try_from(i).unwrap_or(NOTIFY_QP),
                        qpn,
                        seen: 0,
                    },
                    state: "replaced again",
                }
                .into())
            }
        };
        connect::to_rtr(qp, &path)?;
        connect::to_rts(qp, &path)
    }
}
