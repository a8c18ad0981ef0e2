//! Fail-back on a [`Connected`] virtual QP: a failed data QP, or SPRAY's notify QP,
//! replaced by a fresh one, connected to the peer's fresh one through the three
//! [`FailBack`] messages (see [`crate::failback`] for the protocol). The application
//! carries the messages over its side channel; this side makes, connects and hands
//! the QPs to vqp-core ([`VirtualQp::rejoin`](vqp_core::VirtualQp::rejoin), then
//! [`resume`](vqp_core::VirtualQp::resume); `rejoin_notify` and `resume_notify` for
//! the notify QP).

use super::{path_to, random_24bit, Connected, Settings};
use crate::card::{Capabilities, Card, QpAddr};
use crate::connect;
use crate::enums::PortState;
use crate::error::{Error, Result};
use crate::failback::{notify_psn, FailBack, FailBackError, NOTIFY_QP};
use crate::provider::VerbsQp;
use crate::verbs::{CompletionQueue, DeviceAttr, PortAttr, QpCap, QpInit};

/// Where fail-back of one data QP stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Nothing under way.
    Idle,
    /// This side offered its replacement (QP number, PSN) and waits for the answer.
    Offered { qpn: u32, psn: u32 },
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
        const B: usize,
        const DEVS: usize,
    > Connected<N, D, S, W, B, DEVS>
{
    /// Starts fail-back of data QP `i` (normally one that failed,
    /// [`VirtualQp::data_qp_failed`](vqp_core::VirtualQp::data_qp_failed)): a fresh
    /// QP on its device, in INIT with its receives posted, takes its place; returns
    /// the Offer to send to the peer. Offering again while an offer is unanswered
    /// replaces the offered QP.
    ///
    /// # Errors
    /// [`Error::FailBack`] when the peer's card lacks fail-back or there is no data
    /// QP `i`; [`Error::Restore`] when vqp-core refuses (re-dispatch off, the
    /// virtual QP failed, or it is the last path with no grace period);
    /// [`Error::Verbs`] when the QP cannot be made.
    pub fn offer_rejoin(&mut self, i: usize) -> Result<FailBack> {
        self.peer_fails_back()?;
        self.lane_index(i)?;
        let (qpn, psn) = self.replace(i)?;
        self.rejoin.steps[i] = Step::Offered { qpn, psn };
        let m = FailBack::Offer {
            lane: i as u8,
            qpn,
            psn,
        };
        m.check()?;
        Ok(m)
    }

    /// Starts fail-back of the SPRAY notify QP, which failed
    /// ([`VirtualQp::notify_qp_failed`](vqp_core::VirtualQp::notify_qp_failed)): once
    /// its receives have all flushed, a fresh QP on its device, in INIT with the
    /// notification receives that did not complete posted again, takes its place;
    /// returns the offer, which carries how many of the peer's notifies arrived.
    ///
    /// # Errors
    /// As [`offer_rejoin`](Self::offer_rejoin); [`Error::Restore`] with
    /// [`RestoreError::NotDrained`](vqp_core::RestoreError::NotDrained) while the old
    /// QP's receives are still flushing (keep polling, offer again), or with
    /// `NoNotifyQp`.
    pub fn offer_notify_rejoin(&mut self) -> Result<FailBack> {
        self.peer_fails_back()?;
        let seen = self.notify_seen()?;
        let n = self.notify_index();
        let (qpn, psn) = self.replace(n)?;
        self.rejoin.steps[n] = Step::Offered { qpn, psn };
        let m = FailBack::NotifyOffer { qpn, seen };
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
        let Some(qp) = self.qp_at(i) else {
            return Ok(false);
        };
        let port = qp.qp().context().query_port(self.rejoin.settings.port)?;
        Ok(port.state() == PortState::Active)
    }

    /// Whether fail-back of data QP `i` ([`NOTIFY_QP`]: of the notify QP) is under
    /// way: offered or answered, and not yet carrying traffic on this side.
    pub fn rejoining(&self, i: usize) -> bool {
        self.index_of(i)
            .is_ok_and(|i| self.rejoin.steps.get(i).is_some_and(|s| *s != Step::Idle))
    }

    /// Takes a fail-back message from the peer; returns the one to send back, if any:
    /// an Offer is answered (or refused, when vqp-core cannot take the replacement),
    /// an Answer makes this side's replacement carry traffic and is followed by
    /// Ready, a Ready makes it carry traffic here, a Refuse leaves the offered QP
    /// failed. An Offer crossing this side's own for the same QP is ignored when
    /// this side's (QP number, PSN) is lower: the peer takes it instead. An offer
    /// for the notify QP while this side's still runs takes it out (its receives
    /// flush) and is refused; so is one while they are still flushing: the peer
    /// offers again.
    ///
    /// # Errors
    /// [`Error::FailBack`] for a message about no data QP or that does not follow
    /// from where that QP stands (nothing changed); [`Error::Verbs`] when a QP
    /// cannot be made or connected (that QP stays failed).
    pub fn on_failback(&mut self, m: FailBack) -> Result<Option<FailBack>> {
        m.check()?;
        let i = self.index_of(usize::from(m.lane()))?;
        let step = self.rejoin.steps[i];
        let lane = m.lane();
        let unexpected = || -> Error {
            FailBackError::Unexpected {
                message: m,
                state: step.name(),
            }
            .into()
        };
        // The QP number, first PSN and count of notifies an offer or answer carries.
        let fields = |m: FailBack| match m {
            FailBack::Offer { qpn, psn, .. } | FailBack::Answer { qpn, psn, .. } => (qpn, psn, 0),
            FailBack::NotifyOffer { qpn, seen } | FailBack::NotifyAnswer { qpn, seen } => {
                (qpn, notify_psn(qpn), seen)
            }
            FailBack::Ready { .. } | FailBack::Refuse { .. } => (0, 0, 0),
        };
        match m {
            FailBack::Offer { .. } | FailBack::NotifyOffer { .. } => {
                let (qpn, psn, peer_seen) = fields(m);
                let (mine, my_psn) = match step {
                    Step::Offered { qpn: mq, psn: mp } if (mq, mp) < (qpn, psn) => {
                        return Ok(None);
                    }
                    // Our offer lost (or crossed an equal one): our offered QP, in
                    // INIT with its receives posted, answers theirs.
                    Step::Offered { qpn: mq, psn: mp } => (mq, mp),
                    Step::Idle | Step::Answered { .. } => {
                        if i == self.notify_index() && !self.notify_drained() {
                            return Ok(Some(FailBack::Refuse { lane }));
                        }
                        match self.replace(i) {
                            Ok(made) => made,
                            Err(Error::Restore(_)) => return Ok(Some(FailBack::Refuse { lane })),
                            Err(e) => return Err(e),
                        }
                    }
                };
                self.connect_lane(i, qpn, psn, mine, my_psn)?;
                self.rejoin.steps[i] = Step::Answered { peer_seen };
                Ok(Some(if i == self.notify_index() {
                    FailBack::NotifyAnswer {
                        qpn: mine,
                        seen: self.notify_seen()?,
                    }
                } else {
                    FailBack::Answer {
                        lane,
                        qpn: mine,
                        psn: my_psn,
                    }
                }))
            }
            FailBack::Answer { .. } | FailBack::NotifyAnswer { .. } => {
                let Step::Offered {
                    qpn: mine,
                    psn: my_psn,
                } = step
                else {
                    return Err(unexpected());
                };
                let (qpn, psn, peer_seen) = fields(m);
                self.connect_lane(i, qpn, psn, mine, my_psn)?;
                self.resume(i, peer_seen)?;
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

    fn peer_fails_back(&self) -> Result<()> {
        if self.rejoin.peer.caps.contains(Capabilities::FAIL_BACK) {
            Ok(())
        } else {
            Err(FailBackError::PeerLacks.into())
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
    /// own, or the notify QP's for [`NOTIFY_QP`].
    fn index_of(&self, lane: usize) -> Result<usize> {
        if lane == usize::from(NOTIFY_QP) {
            if self.vqp.notify_qp().is_none() || self.rejoin.peer.notify.is_none() {
                return Err(FailBackError::NoNotifyQp.into());
            }
            return Ok(self.notify_index());
        }
        self.lane_index(lane)?;
        Ok(lane)
    }

    /// The QP in place `i` (a data QP, or the notify QP past them).
    fn qp_at(&self, i: usize) -> Option<&VerbsQp> {
        if i == self.notify_index() {
            self.vqp.notify_qp()
        } else {
            self.vqp.data_qp(i)
        }
    }

    /// How many of the peer's notifies this side's old notify QP received, once final.
    fn notify_seen(&self) -> Result<u32> {
        if self.vqp.notify_qp().is_none() {
            return Err(FailBackError::NoNotifyQp.into());
        }
        self.vqp
            .notifies_seen()
            .ok_or(Error::Restore(vqp_core::RestoreError::NotDrained))
    }

    /// Whether the notify QP's count is final; if it still ran, it is taken out now
    /// (the peer replaces the pair), and its receives start to flush.
    fn notify_drained(&mut self) -> bool {
        if !self.vqp.notify_qp_failed() {
            self.vqp.retire_notify();
        }
        self.vqp.notifies_seen().is_some()
    }

    /// The QP in place `i` carries traffic again: the peer's is ready.
    fn resume(&mut self, i: usize, peer_seen: u32) -> Result<()> {
        let resumed = if i == self.notify_index() {
            self.vqp.resume_notify(peer_seen)
        } else {
            self.vqp.resume(i)
        };
        resumed.map_err(Error::Restore)
    }

    /// A fresh QP on the device of the QP in place `i`, in INIT, handed to vqp-core in
    /// its place (receives posted, not sending); the old one is kept until the next
    /// replacement. Returns the new QP's number and first PSN.
    fn replace(&mut self, i: usize) -> Result<(u32, u32)> {
        let notify = i == self.notify_index();
        let Some(old) = self.qp_at(i) else {
            return Err(FailBackError::NoSuchQp {
                lane: u8::try_from(i).unwrap_or(u8::MAX),
                data_qps: self.vqp.data_qps(),
            }
            .into());
        };
        let pd = old.qp().pd();
        let device = if notify {
            self.vqp.notify_qp_device()
        } else {
            self.vqp.data_qp_device(i)
        };
        let r = &self.rejoin;
        let dev = &r.devices[usize::from(device.unwrap_or(0))];
        let remote = if notify {
            r.peer.notify
        } else {
            r.peer.data.get(i).copied()
        };
        let Some(remote) = remote else {
            return Err(FailBackError::NoNotifyQp.into());
        };
        let qp = pd.create_qp(&QpInit::rc(&dev.cq, r.cap))?;
        let qpn = qp.qp_num();
        let psn = if notify {
            notify_psn(qpn)
        } else {
            random_24bit()
        };
        let path = path_to(&r.settings, &dev.port, &dev.attr, &r.peer, remote, psn)?;
        connect::to_init(&qp, &path)?;
        let qp = VerbsQp::new(qp);
        let old = if notify {
            self.vqp.rejoin_notify(qp)
        } else {
            self.vqp.rejoin(i, qp)
        }
        .map_err(Error::Restore)?;
        self.rejoin.retired[i] = Some(old);
        Ok((qpn, psn))
    }

    /// The replacement in place `i` (QP number `mine`, first PSN `my_psn`), in INIT,
    /// to RTR and RTS towards the peer's replacement `qpn`, first PSN `psn`.
    fn connect_lane(&mut self, i: usize, qpn: u32, psn: u32, mine: u32, my_psn: u32) -> Result<()> {
        let notify = i == self.notify_index();
        let device = if notify {
            self.vqp.notify_qp_device()
        } else {
            self.vqp.data_qp_device(i)
        };
        let r = &self.rejoin;
        let dev = &r.devices[usize::from(device.unwrap_or(0))];
        let port = if notify {
            r.peer.notify
        } else {
            r.peer.data.get(i).copied()
        }
        .map_or(0, |a| a.port);
        let remote = QpAddr { qpn, psn, port };
        let path = path_to(&r.settings, &dev.port, &dev.attr, &r.peer, remote, my_psn)?;
        let qp = match self.qp_at(i) {
            Some(q) if q.qp().qp_num() == mine => q.qp(),
            _ => {
                return Err(FailBackError::Unexpected {
                    message: FailBack::Answer {
                        lane: u8::try_from(i).unwrap_or(NOTIFY_QP),
                        qpn,
                        psn,
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
