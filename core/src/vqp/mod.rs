//! The virtual queue pair: one QP to the application, several physical RC QPs
//! underneath.
//!
//! ```text
//!   post_send ─► slot ring (posting order) ─► dispatch ─► per-QP chains ─► QP 0..N-1
//!                     ▲                                                     │
//!   poll ◄── in-order ┘◄── credit runs ◄── physical completions ◄──────────┘
//! ```
//! A request takes a slot; dispatch cuts it into fragments and stages each on a data
//! QP with room (by the configured [`Policy`]: round-robin by default, skipping full
//! QPs); every QP's staged fragments are
//! posted as one chain whose last WQE alone is signaled. Requests that do not fit
//! wait in the slot ring, which is also the pending FIFO: dispatch resumes, in
//! posting order, as completions free room. Completions are reported strictly in
//! posting order.
//!
//! Two shortcuts give the same WQEs on the same QPs as the general round: a request
//! that goes as one WQE while nothing waits before it is posted at once, on its own,
//! and a fragmented request whose shares all fit is staged QP by QP, each share as one
//! run (a run per WQE when every WQE is signaled). On the completion side, a success
//! naming the oldest run of a healthy QP is credited without the general path.
//!
//! # Parts
//! [`VirtualQp`] is the parent of parts that own their state and the methods on it
//! and import nothing of the virtual QP. It holds four: the physical QPs (`lanes`:
//! the data and notify lanes, which have room, which have a chain staged, and the
//! striping state), the send side (`sender`: the slot ring in posting order, the
//! dispatch and notify cursors, DQPLB's numbering), the receive side (`receiver`: the
//! application's receives, DQPLB's reorder window and held messages) and the failover
//! state (`recovery`: what waits to be posted again, the grace period's hold, what was
//! survived). Below them: a lane (`lane`, one physical QP, with its runs in `run`),
//! the slot rings (`slots`, crediting included), DQPLB's send numbering
//! (`numbering`), the striping policies (`policy`) and the data QP choice (`choice`),
//! what a request's WQEs are made of (`fragment`), the configuration (`config`) and
//! the refusals (`error`). Where work needs several parts at once (posting on the
//! lanes what the send ring holds, routing a completion, failing over), it is the
//! parent's, in the files named for that work (`send`, `dispatch`, `spread`,
//! `complete`, `recv`, `failover`, `counted`, `fail`), which pass each part the
//! state of the others it needs.
//!
//! Capacities come in the one order of [`caps`]; each part takes only those it holds
//! (a lane `D`, the slot rings `S`, the reorder window `W`).

mod choice;
mod complete;
mod config;
mod counted;
mod dispatch;
mod error;
mod fail;
mod failover;
mod fragment;
mod lane;
mod lanes;
mod numbering;
mod policy;
mod receiver;
mod recovery;
mod recv;
mod run;
mod send;
mod sender;
mod slots;
mod spread;

pub use config::{BuildError, Config, Mode, Signaling};
pub use error::{PostRecvError, PostSendError, RestoreError, Stray};
pub use policy::Policy;
pub use recovery::Failover;
pub use run::LaneStats;

use crate::caps;
use crate::phys::{PhysQp, PhysWc};
use crate::seq::Seq;
use crate::wr::{Wc, WcOut, WcStatus, MAX_DEVICES};
use crate::wrid::{Kind, WrId, NOTIFY_LANE};
use lanes::Lanes;
use policy::{Served, SLOW_START};
use receiver::Receiver;
use recovery::Recovery;
use sender::Sender;

/// One virtual QP over up to `N` data QPs (plus a SPRAY notify QP).
///
/// Capacities are type parameters, checked at compile time (see [`caps`] for their
/// one order and defaults): `D` send WQEs tracked per physical QP (≥
/// `max_outstanding`), `S` virtual requests in flight per direction (a power of
/// two), `W` the DQPLB reorder window (a power of two, at least `N·D`, the most
/// fragments a peer of the same type can have in flight).
///
/// All work happens inside [`post_send`](Self::post_send),
/// [`post_recv`](Self::post_recv) and the owning
/// [`VirtualCq::poll`](crate::VirtualCq::poll): no heap, no lock, no system call
/// beyond what the physical QP's own post does.
pub struct VirtualQp<
    Q,
    const N: usize = { caps::DATA_QPS },
    const D: usize = { caps::WQES },
    const S: usize = { caps::SLOTS },
    const W: usize = { caps::WINDOW },
> {
    cfg: Config,
    /// Index within the owning virtual CQ, carried in every physical wr_id.
    tag: u8,
    /// The physical QPs and where fragments go.
    lanes: Lanes<Q, N, D>,
    /// The send side's requests.
    tx: Sender<S>,
    /// The receive side's state.
    rx: Receiver<S, W>,
    /// What failover keeps: runs and pass-through requests to post again, the hold.
    rec: Recovery<S, W>,
    /// The first error; once set, no new request is taken.
    failed: Option<WcStatus>,
    strays: u64,
    /// Tests only: stage every fragment one by one, never spread a request.
    #[cfg(test)]
    one_by_one: bool,
}

impl<Q: PhysQp, const N: usize, const D: usize, const S: usize, const W: usize>
    VirtualQp<Q, N, D, S, W>
{
    const CHECK: () = {
        assert!(N >= 1 && N <= 64, "between 1 and 64 data QPs");
        assert!(D.is_power_of_two(), "WQEs per QP must be a power of two");
        assert!(
            W >= N * D,
            "reorder window must cover every fragment in flight"
        );
    };

    /// Build a virtual QP over `data` (QP, device index) pairs and, for SPRAY with
    /// several data QPs, a `notify` QP. The QPs may be in any state; post nothing
    /// before they are connected.
    pub fn new(
        cfg: Config,
        data: impl IntoIterator<Item = (Q, u8)>,
        notify: Option<(Q, u8)>,
    ) -> Result<Self, BuildError> {
        let () = Self::CHECK;
        cfg.split.validate().map_err(BuildError::Split)?;
        if cfg.max_outstanding == 0 || cfg.max_outstanding as usize > D {
            return Err(BuildError::MaxOutstanding {
                given: cfg.max_outstanding,
                capacity: D,
            });
        }
        if cfg.recv_depth == 0 || cfg.recv_depth > 1 << 24 {
            return Err(BuildError::RecvDepth(cfg.recv_depth));
        }
        let lanes = Lanes::new(&cfg, data, notify)?;
        let given = lanes.data.len();
        // The receiver's frontier can lag the sender's oldest outstanding fragment by
        // every receive it holds unprocessed; what is left of its window bounds how
        // far ahead the sender may number fragments (a stalled QP must not let the
        // others outrun the window).
        let unprocessed = given as u64 * u64::from(cfg.recv_depth);
        let in_flight = given as u64 * u64::from(cfg.max_outstanding);
        if cfg.mode == Mode::Dqplb && given > 1 && (W as u64) < unprocessed + in_flight {
            return Err(BuildError::Window {
                window: W,
                needed: unprocessed + in_flight,
            });
        }
        // Every receive DQPLB keeps posted may bring a message no receive waits for;
        // the slot ring must hold them all (see `replenish`).
        if cfg.mode == Mode::Dqplb && given > 1 && (S as u64) < unprocessed {
            return Err(BuildError::Slots {
                slots: S,
                needed: unprocessed,
            });
        }
        let seq_credit = (W as u64).saturating_sub(unprocessed) as u32;
        Ok(Self {
            cfg,
            tag: 0,
            lanes,
            tx: Sender::new(Seq::new(cfg.send_seq), seq_credit),
            rec: Recovery::new(),
            rx: Receiver::new(Seq::new(cfg.recv_seq)),
            failed: None,
            strays: 0,
            #[cfg(test)]
            one_by_one: false,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The virtual QP number reported in completions.
    pub fn qp_num(&self) -> u32 {
        self.cfg.qp_num
    }

    /// How many data QPs.
    pub fn data_qps(&self) -> usize {
        self.lanes.data.len()
    }

    /// Data QP `i`'s number (`None` past the end).
    pub fn data_qp_num(&self, i: usize) -> Option<u32> {
        self.lanes.data.get(i).map(|l| l.qp_num)
    }

    /// The notify QP's number, in SPRAY with several data QPs.
    pub fn notify_qp_num(&self) -> Option<u32> {
        self.lanes.notify.as_ref().map(|l| l.qp_num)
    }

    /// Data QP `i`.
    pub fn data_qp(&self, i: usize) -> Option<&Q> {
        self.lanes.data.get(i).map(|l| &l.qp)
    }

    /// Data QP `i`, mutably (to connect it, say).
    pub fn data_qp_mut(&mut self, i: usize) -> Option<&mut Q> {
        self.lanes.data.get_mut(i).map(|l| &mut l.qp)
    }

    /// The notify QP.
    pub fn notify_qp(&self) -> Option<&Q> {
        self.lanes.notify.as_ref().map(|l| &l.qp)
    }

    /// The notify QP, mutably.
    pub fn notify_qp_mut(&mut self) -> Option<&mut Q> {
        self.lanes.notify.as_mut().map(|l| &mut l.qp)
    }

    /// Counters of data QP `i`, or of the notify QP for `i == data_qps()`.
    pub fn lane_stats(&self, i: usize) -> Option<LaneStats> {
        self.lanes.data_or_notify(i).map(|l| l.stats)
    }

    /// The device data QP `i` is on; `None` past the end.
    pub fn data_qp_device(&self, i: usize) -> Option<u8> {
        self.lanes.data.get(i).map(|l| l.device)
    }

    /// The device the SPRAY notify QP is on; `None` without one.
    pub fn notify_qp_device(&self) -> Option<u8> {
        self.lanes.notify.as_ref().map(|l| l.device)
    }

    /// Whether data QP `i` failed and the virtual QP went on without it (see
    /// [`Self::restore`]); false past the end.
    pub fn data_qp_failed(&self, i: usize) -> bool {
        self.lanes.data.get(i).is_some_and(|l| l.survived)
    }

    /// Data QP `i`'s weight under the weighted policies: as configured or set, or
    /// under [`Policy::Adaptive`] its estimated service rate in bytes per second
    /// once one was measured. `None` past the end.
    pub fn weight(&self, i: usize) -> Option<u64> {
        (i < self.lanes.data.len()).then(|| self.lanes.striping.weight(i))
    }

    /// Sets data QP `i`'s weight (at least 1; see [`Self::weight`]); the next
    /// fragments follow it. False, having changed nothing, past the end.
    pub fn set_weight(&mut self, i: usize, weight: u64) -> bool {
        let n = self.lanes.data.len();
        if i >= n {
            return false;
        }
        self.lanes.striping.set_weight(i, weight, n);
        true
    }

    /// Under [`Policy::Adaptive`], measure each data QP's service rate at `now_ns`
    /// (nanoseconds from any fixed origin, never going back) and re-weigh the QPs
    /// when [`Config::adapt_ns`] has passed since the last time; does nothing
    /// otherwise. It also keeps the time of a virtual QP that lost every data QP
    /// (re-dispatch): it fails once [`Config::grace_ns`] has passed without a
    /// [`Self::restore`]. Call it from the polling loop, often (it returns at once
    /// when nothing is due); the caller owns the clock, so the core reads none.
    /// Returns whether the weights changed.
    pub fn sample(&mut self, now_ns: u64) -> bool {
        if self.rec.held() {
            self.check_grace(now_ns);
        }
        if self.cfg.policy != Policy::Adaptive
            || !self.lanes.striping.due(now_ns, self.cfg.adapt_ns)
        {
            return false;
        }
        let mut served = [Served {
            done: 0,
            idled: false,
            failed: false,
            out: 0,
        }; N];
        for (i, (s, l)) in served.iter_mut().zip(self.lanes.data.iter()).enumerate() {
            *s = Served {
                // Handed to the QP and no longer outstanding (a QP with an error is
                // failed, and weighed apart).
                done: l.stats.bytes.wrapping_sub(l.bytes_out),
                // Ran dry, and never held work back: a QP that runs dry only because
                // one completion acknowledged all it had still counts as busy when
                // work waited for it.
                idled: l.idled && !self.lanes.striping.waited_for(i),
                failed: l.failed,
                out: l.bytes_out,
            };
        }
        let n = self.lanes.data.len();
        let changed = self
            .lanes
            .striping
            .sample(now_ns, self.cfg.adapt_ns, &served[..n]);
        if changed {
            // A new interval starts: a QP idles in it if it is idle now or runs dry.
            let max = self.cfg.max_outstanding;
            let frag = u64::from(self.cfg.split.max_frag).max(1);
            let before = self.lanes.room;
            for (i, l) in self.lanes.data.iter_mut().enumerate() {
                l.idled = l.outstanding == 0;
                // One data QP has no share to keep right: it keeps its maximum.
                if let Some(bytes) = self.lanes.striping.budget(i).filter(|_| n > 1) {
                    // In fragments, rounded up.
                    let wqes = bytes.div_ceil(frag).max(u64::from(SLOW_START));
                    l.limit = u32::try_from(wqes).unwrap_or(u32::MAX).min(max);
                    if l.has_room() {
                        self.lanes.room |= 1 << i;
                    } else {
                        self.lanes.room &= !(1 << i);
                    }
                }
            }
            // A QP with room again takes the fragments that waited for it.
            if self.lanes.room & !before != 0 {
                self.progress();
            }
        }
        changed
    }

    /// The first error, once the virtual QP failed.
    pub fn failure(&self) -> Option<WcStatus> {
        self.failed
    }

    /// Virtual send requests taken and not yet reported.
    pub fn sends_in_flight(&self) -> usize {
        self.tx.len()
    }

    /// Virtual receive requests taken and not yet reported.
    pub fn recvs_in_flight(&self) -> usize {
        self.rx.len()
    }

    /// Physical completions that named this virtual QP but no request in flight.
    pub fn strays(&self) -> u64 {
        self.strays
    }

    /// The DQPLB receiver's next expected sequence number.
    pub fn recv_seq(&self) -> Seq {
        self.rx.recv_seq()
    }

    /// DQPLB fragments that arrived ahead of an earlier one, in total.
    pub fn reordered_arrivals(&self) -> u64 {
        self.rx.reordered()
    }

    /// The next DQPLB sequence number this side sends.
    pub fn send_seq(&self) -> Seq {
        self.tx.num.next()
    }

    pub(crate) fn set_tag(&mut self, tag: u8) {
        self.tag = tag;
    }

    /// The (device, WQEs) each physical QP can have outstanding, send and receive,
    /// for completion-queue sizing.
    pub(crate) fn cq_demand(&self) -> [u64; MAX_DEVICES] {
        let per_qp = u64::from(self.cfg.max_outstanding) + u64::from(self.cfg.recv_depth);
        self.lanes.cq_demand(per_qp)
    }

    /// Feed one physical completion that `device`'s CQ returned and whose wr_id
    /// decoded to this virtual QP. Work it enables happens in [`Self::progress`].
    pub fn handle(&mut self, wc: &PhysWc, device: u8) -> Result<(), Stray> {
        match WrId::decode(wc.wr_id) {
            Some(id) => self.route(wc, id, device),
            None => {
                self.strays += 1;
                Err(Stray)
            }
        }
    }

    /// [`Self::handle`] for a wr_id already decoded.
    pub(crate) fn route(&mut self, wc: &PhysWc, id: WrId, device: u8) -> Result<(), Stray> {
        let result = self.route_inner(wc, id, device);
        if result.is_err() {
            self.strays += 1;
        }
        result
    }

    #[inline]
    fn route_inner(&mut self, wc: &PhysWc, id: WrId, device: u8) -> Result<(), Stray> {
        if id.tag != self.tag {
            return Err(Stray);
        }
        if id.kind == Kind::Send && id.lane != NOTIFY_LANE {
            // The common case first: a data QP's send completion.
            return match self.lanes.data.get(id.lane as usize) {
                Some(l) if l.qp_num == wc.qp_num && l.device == device => {
                    self.data_completion(id.lane as usize, id.id, wc.status)
                }
                _ => Err(Stray),
            };
        }
        let lane = if id.lane == NOTIFY_LANE {
            self.lanes.notify.as_ref()
        } else {
            self.lanes.data.get(id.lane as usize)
        };
        match lane {
            Some(l) if l.qp_num == wc.qp_num && l.device == device => {}
            Some(l) if l.retired == Some(wc.qp_num) && l.retired_device == device => {
                if id.lane == NOTIFY_LANE {
                    return Self::retired_counted_completion(id.kind, wc);
                }
                return self.retired_completion(id.lane as usize, id.kind, wc);
            }
            _ => return Err(Stray),
        }
        match id.kind {
            Kind::Send => self.send_completion(id.lane, id.id, wc.status),
            Kind::Recv => self.recv_completion(id.lane, id.id, wc),
            Kind::SeqRecv => self.seq_completion(id.lane, wc),
        }
    }

    /// Do the work completions enabled: dispatch waiting fragments and notifies,
    /// replenish DQPLB receives, post waiting receives.
    #[inline]
    pub fn progress(&mut self) {
        if self.tx.has_work(self.lanes.notify_device != 0) || self.rec.pending() {
            self.dispatch();
        }
        if self.rx.has_work() {
            self.post_recvs();
        }
    }

    /// Write completed requests into `out`, sends then receives, each in posting
    /// order; returns how many. Never writes past `out`.
    #[inline]
    pub fn drain(&mut self, out: &mut [Wc]) -> usize {
        self.drain_into(out, 0)
    }

    /// [`drain`](Self::drain) into any [`WcOut`], from index `at`; returns how many
    /// it wrote.
    #[inline]
    pub fn drain_into<O: WcOut + ?Sized>(&mut self, out: &mut O, at: usize) -> usize {
        let n = self.drain_sends(out, at);
        n + self.drain_recvs(out, at + n)
    }
}

#[cfg(test)]
mod tests;
