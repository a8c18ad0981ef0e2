//! Fail-back on a [`Connected`] virtual QP: a failed data QP replaced by a fresh one,
//! connected to the peer's fresh one through the three [`FailBack`] messages (see
//! [`crate::failback`] for the protocol). The application carries the messages over
//! its side channel; this side makes, connects and hands the QPs to vqp-core
//! ([`VirtualQp::rejoin`](vqp_core::VirtualQp::rejoin), then
//! [`resume`](vqp_core::VirtualQp::resume)).

use super::{path_to, random_24bit, Connected, Settings};
use crate::card::{Capabilities, Card, QpAddr};
use crate::connect;
use crate::enums::PortState;
use crate::error::{Error, Result};
use crate::failback::{FailBack, FailBackError};
use crate::provider::VerbsQp;
use crate::verbs::{CompletionQueue, DeviceAttr, PortAttr, QpCap, QpInit};

/// Where fail-back of one data QP stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Nothing under way.
    Idle,
    /// This side offered its replacement (QP number, PSN) and waits for the answer.
    Offered { qpn: u32, psn: u32 },
    /// This side answered the peer's offer and waits for Ready.
    Answered,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Idle => "not being replaced",
            Step::Offered { .. } => "offered",
            Step::Answered => "answered",
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

/// What a connected virtual QP keeps to replace its data QPs.
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
        let n = peer.data.len();
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
        if !self.rejoin.peer.caps.contains(Capabilities::FAIL_BACK) {
            return Err(FailBackError::PeerLacks.into());
        }
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

    /// Whether the port data QP `i` uses is active (`ibv_query_port`: a call into the
    /// library, for the control path). A replacement over a port that is down would
    /// only fail again.
    ///
    /// # Errors
    /// [`Error::FailBack`] for no data QP `i`; [`Error::Verbs`] when the query fails.
    pub fn port_active(&self, i: usize) -> Result<bool> {
        self.lane_index(i)?;
        let Some(qp) = self.vqp.data_qp(i) else {
            return Ok(false);
        };
        let port = qp.qp().context().query_port(self.rejoin.settings.port)?;
        Ok(port.state() == PortState::Active)
    }

    /// Whether fail-back of data QP `i` is under way: offered or answered, and not
    /// yet carrying traffic on this side.
    pub fn rejoining(&self, i: usize) -> bool {
        self.rejoin.steps.get(i).is_some_and(|s| *s != Step::Idle)
    }

    /// Takes a fail-back message from the peer; returns the one to send back, if any:
    /// an Offer is answered (or refused, when vqp-core cannot take the replacement),
    /// an Answer makes this side's replacement carry traffic and is followed by
    /// Ready, a Ready makes it carry traffic here, a Refuse leaves the offered QP
    /// failed. An Offer crossing this side's own for the same QP is ignored when
    /// this side's (QP number, PSN) is lower: the peer takes it instead.
    ///
    /// # Errors
    /// [`Error::FailBack`] for a message about no data QP or that does not follow
    /// from where that QP stands (nothing changed); [`Error::Verbs`] when a QP
    /// cannot be made or connected (that QP stays failed).
    pub fn on_failback(&mut self, m: FailBack) -> Result<Option<FailBack>> {
        m.check()?;
        let i = usize::from(m.lane());
        self.lane_index(i)?;
        let step = self.rejoin.steps[i];
        let unexpected = || -> Error {
            FailBackError::Unexpected {
                message: m,
                state: step.name(),
            }
            .into()
        };
        match m {
            FailBack::Offer { lane, qpn, psn } => {
                let (mine, my_psn) = match step {
                    Step::Offered { qpn: mq, psn: mp } if (mq, mp) < (qpn, psn) => {
                        return Ok(None);
                    }
                    // Our offer lost (or crossed an equal one): our offered QP, in
                    // INIT with its receives posted, answers theirs.
                    Step::Offered { qpn: mq, psn: mp } => (mq, mp),
                    Step::Idle | Step::Answered => match self.replace(i) {
                        Ok(made) => made,
                        Err(Error::Restore(_)) => return Ok(Some(FailBack::Refuse { lane })),
                        Err(e) => return Err(e),
                    },
                };
                self.connect_lane(i, qpn, psn, mine, my_psn)?;
                self.rejoin.steps[i] = Step::Answered;
                Ok(Some(FailBack::Answer {
                    lane,
                    qpn: mine,
                    psn: my_psn,
                }))
            }
            FailBack::Answer { lane, qpn, psn } => {
                let Step::Offered {
                    qpn: mine,
                    psn: my_psn,
                } = step
                else {
                    return Err(unexpected());
                };
                self.connect_lane(i, qpn, psn, mine, my_psn)?;
                self.vqp.resume(i).map_err(Error::Restore)?;
                self.rejoin.steps[i] = Step::Idle;
                Ok(Some(FailBack::Ready { lane }))
            }
            FailBack::Ready { .. } => {
                if step != Step::Answered {
                    return Err(unexpected());
                }
                self.vqp.resume(i).map_err(Error::Restore)?;
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

    fn lane_index(&self, i: usize) -> Result<()> {
        let data_qps = self.vqp.data_qps();
        if i >= data_qps || i >= self.rejoin.steps.len() {
            return Err(FailBackError::NoSuchQp {
                lane: u8::try_from(i).unwrap_or(u8::MAX),
                data_qps,
            }
            .into());
        }
        Ok(())
    }

    /// A fresh QP on data QP `i`'s device, in INIT, handed to vqp-core in its place
    /// (receives posted, not sending); the old one is kept until the next
    /// replacement. Returns the new QP's number and first PSN.
    fn replace(&mut self, i: usize) -> Result<(u32, u32)> {
        let Some(old) = self.vqp.data_qp(i) else {
            return Err(FailBackError::NoSuchQp {
                lane: u8::try_from(i).unwrap_or(u8::MAX),
                data_qps: self.vqp.data_qps(),
            }
            .into());
        };
        let pd = old.qp().pd();
        let device = usize::from(self.vqp.data_qp_device(i).unwrap_or(0));
        let r = &self.rejoin;
        let dev = &r.devices[device];
        let qp = pd.create_qp(&QpInit::rc(&dev.cq, r.cap))?;
        let psn = random_24bit();
        let remote = r.peer.data[i];
        let path = path_to(&r.settings, &dev.port, &dev.attr, &r.peer, remote, psn)?;
        connect::to_init(&qp, &path)?;
        let qpn = qp.qp_num();
        let old = self
            .vqp
            .rejoin(i, VerbsQp::new(qp))
            .map_err(Error::Restore)?;
        self.rejoin.retired[i] = Some(old);
        Ok((qpn, psn))
    }

    /// Data QP `i`'s replacement (QP number `mine`, first PSN `my_psn`), in INIT, to
    /// RTR and RTS towards the peer's replacement `qpn`, first PSN `psn`.
    fn connect_lane(&mut self, i: usize, qpn: u32, psn: u32, mine: u32, my_psn: u32) -> Result<()> {
        let device = usize::from(self.vqp.data_qp_device(i).unwrap_or(0));
        let r = &self.rejoin;
        let dev = &r.devices[device];
        let remote = QpAddr {
            qpn,
            psn,
            port: r.peer.data[i].port,
        };
        let path = path_to(&r.settings, &dev.port, &dev.attr, &r.peer, remote, my_psn)?;
        let qp = match self.vqp.data_qp(i) {
            Some(q) if q.qp().qp_num() == mine => q.qp(),
            _ => {
                return Err(FailBackError::Unexpected {
                    message: FailBack::Answer {
                        lane: i as u8,
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
