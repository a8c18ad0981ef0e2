//! One physical QP inside a virtual QP: what it has in flight, the chain being
//! built for it this round, and its receive bookkeeping.
//!
//! Send WQEs are tracked as *runs*: consecutive WQEs of one virtual request on this
//! QP. A completion names a request's slot id; because a QP completes its send
//! queue in order, it also completes every run before the one it names. That is what
//! lets only the last WQE of each chain be signaled.

use crate::phys::{PhysQp, PostFailure, SendWqe};
use crate::seq::Seq;
use crate::vqp::config::Signaling;
use crate::wr::{SendFlags, WcStatus};
use crate::wrid::id_before;

use super::run::{LaneStats, Run, RunFigures, Taken};

pub(crate) struct Lane<Q, const D: usize> {
    pub qp: Q,
    pub qp_num: u32,
    pub device: u8,
    /// Runs staged or in flight, oldest first, in `runs[(runs_head + i) % D]` for
    /// `i < runs_len`; their counts sum to `outstanding`, so `runs_len ≤ D`.
    runs: [Run; D],
    /// `runs`' figures, at the same indices (written by lanes that weigh or track).
    figures: [RunFigures; D],
    runs_head: u32,
    runs_len: u32,
    /// Send WQEs staged or in flight, never above `limit`.
    pub outstanding: u32,
    /// The most send WQEs the QP may hold: the configured maximum (≤ D), or below
    /// it the adaptive policy's slow start or backlog bound
    /// ([`super::policy::Striping::budget`]).
    pub limit: u32,
    /// The chain being built this round (`staged[..staged_len]`), posted by
    /// [`Lane::flush`]; `staged_len ≤ outstanding ≤ D`.
    staged: [SendWqe; D],
    staged_len: u32,
    /// Bytes staged or in flight (the runs' bytes), kept when `weigh`.
    pub bytes_out: u64,
    /// The QP ran out of send work since the striping policy last looked (kept when
    /// `weigh`).
    pub idled: bool,
    /// A load-aware policy reads `bytes_out` and `idled`: completions keep them.
    /// Round-robin reads neither, and its completions skip them.
    pub weigh: bool,
    /// Re-dispatch is on: each run holds fragments at one stride, so that a failed
    /// QP's runs say which fragments to post again.
    pub track: bool,
    /// `stats.bytes` is kept: `weigh`, `track` or `Config::count_bytes`. A lane that
    /// keeps nothing per run (round-robin, no re-dispatch) skips it when not asked.
    pub tally: bool,
    /// The QP failed and the virtual QP went on without it: its runs are posted
    /// again elsewhere, its completions no longer count.
    pub survived: bool,
    /// The QP number of the failed QP this one replaced, whose receive completions
    /// still count (a fragment that landed is data the sender was told of).
    pub retired: Option<u32>,
    /// The device the replaced QP is on (a notify QP's replacement may go elsewhere).
    pub retired_device: u8,
    /// Receives the replaced QP still had posted.
    pub retired_recvs: u32,
    /// The back run belongs to `staged`, so a WQE of the same request may join it.
    open_run: bool,
    /// The QP reported an error or refused a post: nothing more goes to it.
    pub failed: bool,
    /// A replacement QP waits for its peer (fail-back): failed to senders, but its
    /// receives are posted.
    pub joining: bool,
    /// Receives posted and not yet completed.
    pub recv_outstanding: u32,
    /// DQPLB receives consumed and not yet replenished.
    pub recv_owed: u32,
    /// WQEs posted here that consume a receive of the peer's (a notify, a
    /// pass-through SEND), mod 2^32: the role's count, kept across replacements.
    pub sent: u32,
    /// The application's receives that completed here successfully, mod 2^32: the
    /// role's count too.
    pub seen: u32,
    pub stats: LaneStats,
}

impl<Q: PhysQp, const D: usize> Lane<Q, D> {
    /// A lane for `qp` on `device`, holding at most `limit` send WQEs.
    pub fn new(qp: Q, device: u8, limit: u32) -> Self {
        Self {
            qp_num: qp.qp_num(),
            qp,
            device,
            runs: [Run::EMPTY; D],
            figures: [RunFigures::EMPTY; D],
            runs_head: 0,
            runs_len: 0,
            outstanding: 0,
            limit,
            staged: [SendWqe::EMPTY; D],
            staged_len: 0,
            bytes_out: 0,
            idled: true,
            weigh: false,
            track: false,
            tally: false,
            survived: false,
            retired: None,
            retired_device: device,
            retired_recvs: 0,
            open_run: false,
            failed: false,
            joining: false,
            recv_outstanding: 0,
            recv_owed: 0,
            sent: 0,
            seen: 0,
            stats: LaneStats::default(),
        }
    }

    /// Add a WQE of `len` bytes of request `id` to this round's chain and return it
    /// to be filled in place; the caller checked there is room. With `merge`, it
    /// joins the request's open run; without, it is a run of its own (every WQE
    /// signaled).
    #[inline]
    pub fn stage(
        &mut self,
        id: u64,
        seq: Seq,
        merge: bool,
        len: u32,
        fragment: u32,
    ) -> &mut SendWqe {
        &mut self.stage_run::<false>(id, seq, 0, 1, merge, len, (fragment, 1))[0]
    }

    /// End the open run: what is staged next starts a run of its own.
    #[inline]
    pub fn close_run(&mut self) {
        self.open_run = false;
    }

    /// WQE `j` of the `count` just staged by [`Self::stage_run`] (with `merge` as
    /// given there) carries `len` bytes rather than the `each` it was staged with.
    #[inline]
    pub fn mend_len<const PLAIN: bool>(
        &mut self,
        j: u32,
        count: u32,
        merge: bool,
        each: u32,
        len: u32,
    ) {
        if PLAIN {
            return;
        }
        let back = self.runs_head + self.runs_len - 1;
        let run = if merge { back } else { back - (count - 1 - j) };
        let run = &mut self.figures[run as usize % D];
        run.bytes = run.bytes + u64::from(len) - u64::from(each);
        self.bytes_out = self.bytes_out + u64::from(len) - u64::from(each);
        if self.tally {
            self.stats.bytes = self.stats.bytes + u64::from(len) - u64::from(each);
        }
    }

    /// Bytes staged or in flight.
    #[inline]
    pub fn load(&self) -> u64 {
        self.bytes_out
    }

    /// Add `count` WQEs of request `id` to this round's chain and return them to be
    /// filled in place; the caller checked there is room for all of them. With
    /// `merge` they are one run (joining the request's open run if it has one);
    /// without, a run each (every WQE signaled). `seq` is the DQPLB sequence number
    /// of the first, each next one `step` later; each carries `each` bytes (see
    /// [`Self::mend_len`] for one that does not); `(first, stride)`: they are the
    /// request's fragments `first`, `first + stride`, …. `PLAIN`: the lane neither
    /// weighs its load nor tracks fragments (round-robin without re-dispatch), so only
    /// its byte count is kept and runs carry no fragment or byte figures.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn stage_run<const PLAIN: bool>(
        &mut self,
        id: u64,
        seq: Seq,
        step: u32,
        count: u32,
        merge: bool,
        each: u32,
        (first, stride): (u32, u32),
    ) -> &mut [SendWqe] {
        debug_assert!(self.outstanding as usize + count as usize <= D && !self.failed);
        debug_assert!(!PLAIN || !self.tally);
        let back = (self.runs_head + self.runs_len).wrapping_sub(1) as usize % D;
        let bytes = u64::from(count) * u64::from(each);
        if !PLAIN && self.tally {
            self.stats.bytes += bytes;
        }
        let open = merge && self.open_run && self.runs[back].id == id;
        if !PLAIN {
            self.bytes_out = self.bytes_out.wrapping_add(bytes);
        }
        if PLAIN {
            if open {
                self.runs[back].count += count;
            } else {
                let (runs, per_run) = if merge { (1, count) } else { (count, 1) };
                for j in 0..runs {
                    self.push_run(Run {
                        id,
                        count: per_run,
                        seq: seq.add(j * step),
                    });
                }
            }
        } else if open && self.joins(back, (first, stride), count) {
            let fig = &mut self.figures[back];
            if self.runs[back].count == 1 && self.track {
                fig.stride = first.wrapping_sub(fig.first);
            }
            fig.bytes += bytes;
            self.runs[back].count += count;
        } else {
            if open {
                // A run of the same request that does not continue the open one (its
                // fragments tracked): the open run's last WQE is signaled, so that
                // each run is named by a completion of its own.
                if let Some(w) = self.staged[..self.staged_len as usize].last_mut() {
                    w.flags = w.flags.with(SendFlags::SIGNALED);
                }
            }
            let (runs, per_run) = if merge { (1, count) } else { (count, 1) };
            for j in 0..runs {
                self.push_run_with(
                    Run {
                        id,
                        count: per_run,
                        seq: seq.add(j * step),
                    },
                    RunFigures {
                        first: first.wrapping_add(j * stride),
                        stride,
                        bytes: u64::from(per_run) * u64::from(each),
                    },
                );
            }
        }
        self.open_run = true;
        self.outstanding += count;
        let at = self.staged_len as usize;
        self.staged_len += count;
        &mut self.staged[at..at + count as usize]
    }

    /// Whether `count` fragments `first`, `first + stride`, … may join run `back`
    /// (the open run of their request): always, unless the lane tracks fragments
    /// and they do not continue the run's progression.
    #[inline]
    fn joins(&self, back: usize, (first, stride): (u32, u32), count: u32) -> bool {
        if !self.track {
            return true;
        }
        let (fig, n) = (&self.figures[back], self.runs[back].count);
        let step = if n == 1 {
            first.wrapping_sub(fig.first)
        } else {
            fig.stride
        };
        step != 0
            && first == fig.first.wrapping_add(n.wrapping_mul(step))
            && (count == 1 || stride == step)
    }

    /// Append `run` behind the runs in flight; the caller checked there is room
    /// (runs hold at least one WQE each, so at most `D` are ever in flight).
    #[inline]
    fn push_run(&mut self, run: Run) {
        self.runs[(self.runs_head + self.runs_len) as usize % D] = run;
        self.runs_len += 1;
    }

    /// [`Self::push_run`] with the run's figures.
    #[inline]
    fn push_run_with(&mut self, run: Run, figures: RunFigures) {
        self.figures[(self.runs_head + self.runs_len) as usize % D] = figures;
        self.push_run(run);
    }

    /// Room for `count` more send WQEs within `limit` (and the QP healthy).
    #[inline]
    pub fn has_room_for(&self, count: u32) -> bool {
        self.outstanding + count <= self.limit && !self.failed
    }

    #[inline]
    fn front(&self) -> Option<&Run> {
        (self.runs_len != 0).then(|| &self.runs[self.runs_head as usize % D])
    }

    /// The oldest run and its figures, forgotten.
    #[inline]
    fn pop_front(&mut self) -> Option<(Run, RunFigures)> {
        let run = *self.front()?;
        let figures = self.figures[self.runs_head as usize % D];
        self.runs_head = (self.runs_head + 1) % D as u32;
        self.runs_len -= 1;
        Some((run, figures))
    }

    /// Post this round's chain with one call. On a refusal the lane is broken: every
    /// run it holds is credited with `POST_ERR` (WQEs posted before the refused one
    /// may lack a signaled successor, so their completions cannot be relied on).
    #[inline]
    pub fn flush(
        &mut self,
        signaling: Signaling,
        credit: &mut impl FnMut(u64, u32, WcStatus),
    ) -> Result<(), PostFailure> {
        let staged = &mut self.staged[..self.staged_len as usize];
        let Some(last) = staged.last_mut() else {
            return Ok(());
        };
        last.flags = last.flags.with(SendFlags::SIGNALED);
        if signaling == Signaling::Every {
            for wqe in staged.iter_mut() {
                wqe.flags = wqe.flags.with(SendFlags::SIGNALED);
            }
        }
        self.open_run = false;
        // SAFETY: the post contract: every WQE was built from a request the virtual
        // QP took, whose keys the device checks and whose inline payload (if any) its
        // taker vouched for until it is posted (`post_send_unchecked`) or lent for
        // this call (`post_send_inline`); notifies name no local memory.
        let result = unsafe { self.qp.post_send(staged) };
        let count = self.staged_len;
        self.staged_len = 0;
        self.posted(result, count, credit)
    }

    /// Post `wqe`, the only WQE of request `id` (oldest DQPLB number `seq`), signaled
    /// and on its own: what staging it and [`Self::flush`] do for a chain of one,
    /// without the chain. The caller checked there is room and no chain is staged.
    /// Always inlined, as its one caller `post_alone` is.
    #[inline(always)]
    pub fn post_one(
        &mut self,
        id: u64,
        seq: Seq,
        wqe: &mut SendWqe,
        credit: &mut impl FnMut(u64, u32, WcStatus),
    ) -> Result<(), PostFailure> {
        debug_assert!((self.outstanding as usize) < D && !self.failed && self.staged_len == 0);
        let run = Run { id, count: 1, seq };
        // `tally` is set whenever `weigh` or `track` is: plain round-robin tests one flag.
        if self.tally {
            let bytes = u64::from(wqe.len);
            self.stats.bytes += bytes;
            if self.weigh || self.track {
                let figures = RunFigures {
                    bytes,
                    ..RunFigures::EMPTY
                };
                self.push_run_with(run, figures);
                self.bytes_out = self.bytes_out.wrapping_add(bytes);
            } else {
                self.push_run(run);
            }
        } else {
            self.push_run(run);
        }
        self.outstanding += 1;
        wqe.flags = wqe.flags.with(SendFlags::SIGNALED);
        // SAFETY: the post contract, as in `flush`: a WQE of a request the virtual QP
        // took, with keys the device checks or an inline payload vouched for now.
        let result = unsafe { self.qp.post_send(core::slice::from_ref(wqe)) };
        self.posted(result, 1, credit)
    }

    /// Account for a post of `count` WQEs that returned `result`.
    #[inline]
    fn posted(
        &mut self,
        result: Result<(), PostFailure>,
        count: u32,
        credit: &mut impl FnMut(u64, u32, WcStatus),
    ) -> Result<(), PostFailure> {
        match result {
            Ok(()) => {
                self.stats.wqes += u64::from(count);
                self.stats.chains += 1;
            }
            Err(failure) => {
                self.stats.wqes += failure.posted as u64;
                self.failed = true;
                self.drain(WcStatus::POST_ERR, credit);
            }
        }
        result
    }

    /// The usual send completion: a success naming the oldest run, on a healthy QP.
    /// Forgets that run and returns its request id and WQE count, to be credited;
    /// `None`, having changed nothing, for anything else (see [`Self::complete`]).
    #[inline]
    pub fn complete_oldest(&mut self, id: u64, status: WcStatus) -> Option<(u64, u32)> {
        if self.runs_len == 0 || !status.is_ok() || self.failed {
            return None;
        }
        let at = self.runs_head as usize % D;
        let front = self.runs[at];
        if front.id & crate::wrid::ID_MASK != id {
            return None;
        }
        self.stats.cqes += 1;
        self.runs_head = (self.runs_head + 1) % D as u32;
        self.runs_len -= 1;
        self.outstanding -= front.count;
        if self.weigh {
            self.bytes_out -= self.figures[at].bytes;
            self.idled |= self.outstanding == 0;
        }
        Some((front.id, front.count))
    }

    /// A send completion for request `id` with `status`: credit every run up to and
    /// including the first run of `id`. Returns false when `id` is not in flight here
    /// (a flush completion for a run already credited, or a stray).
    #[inline]
    pub fn complete(
        &mut self,
        id: u64,
        status: WcStatus,
        credit: &mut impl FnMut(u64, u32, WcStatus),
    ) -> bool {
        if let Some((run, count)) = self.complete_oldest(id, status) {
            credit(run, count, WcStatus::SUCCESS);
            return true;
        }
        self.complete_rest(id, status, credit)
    }

    /// [`Self::complete`] for a completion that [`Self::complete_oldest`] did not
    /// take: one that does not name the oldest run, an error, or a QP that already
    /// failed (it handles any completion correctly). Out of line: it keeps the usual
    /// case short.
    #[cold]
    #[inline(never)]
    pub fn complete_rest(
        &mut self,
        id: u64,
        status: WcStatus,
        credit: &mut impl FnMut(u64, u32, WcStatus),
    ) -> bool {
        self.stats.cqes += 1;
        match self.front() {
            Some(front) if !id_before(id, front.id & crate::wrid::ID_MASK) => {}
            _ => return false,
        }
        // Runs before the named one completed before it, in queue order: fine unless
        // the QP had already failed, in which case they were flushed.
        let earlier = if self.failed {
            WcStatus::WR_FLUSH_ERR
        } else {
            WcStatus::SUCCESS
        };
        while let Some((run, figures)) = self.pop_front() {
            self.outstanding -= run.count;
            self.bytes_out = self.bytes_out.wrapping_sub(figures.bytes);
            let matched = run.id & crate::wrid::ID_MASK == id;
            credit(run.id, run.count, if matched { status } else { earlier });
            if matched {
                break;
            }
        }
        self.idled |= self.outstanding == 0;
        if !status.is_ok() {
            self.failed = true;
        }
        true
    }

    /// An error completion naming request `id` on a healthy QP whose fragments
    /// re-dispatch will post again: credit the runs before the named one (they
    /// completed, in queue order), leaving the named run and every later one to
    /// [`Self::take_runs`]. Returns false when `id` is not in flight here.
    pub fn fail_at(&mut self, id: u64, credit: &mut impl FnMut(u64, u32, WcStatus)) -> bool {
        let found = self.runs_iter().any(|r| r.id & crate::wrid::ID_MASK == id);
        if found {
            while self
                .front()
                .is_some_and(|r| r.id & crate::wrid::ID_MASK != id)
            {
                let Some((run, figures)) = self.pop_front() else {
                    break;
                };
                self.outstanding -= run.count;
                self.bytes_out = self.bytes_out.wrapping_sub(figures.bytes);
                credit(run.id, run.count, WcStatus::SUCCESS);
            }
        }
        found
    }

    /// The runs in flight, oldest first.
    fn runs_iter(&self) -> impl Iterator<Item = &Run> {
        (0..self.runs_len).map(move |i| &self.runs[((self.runs_head + i) as usize) % D])
    }

    /// Hand every run to `f`, oldest first, and forget them: the QP failed and its
    /// runs are to be posted again elsewhere.
    pub fn take_runs(&mut self, f: &mut impl FnMut(Taken)) {
        while let Some((run, figures)) = self.pop_front() {
            f(Taken {
                id: run.id,
                count: run.count,
                seq: run.seq,
                first: figures.first,
                stride: figures.stride,
            });
        }
        self.outstanding = 0;
        self.bytes_out = 0;
    }

    /// Put `qp` in the place of the failed QP, healthy and empty (fail-back); returns
    /// the failed one.
    pub fn replace(&mut self, qp: Q) -> Q {
        debug_assert!(self.runs_len == 0 && self.staged_len == 0);
        self.retired = Some(self.qp_num);
        self.retired_device = self.device;
        self.retired_recvs = self.recv_outstanding;
        self.qp_num = qp.qp_num();
        self.failed = false;
        self.survived = false;
        self.joining = false;
        self.open_run = false;
        self.outstanding = 0;
        self.bytes_out = 0;
        self.recv_outstanding = 0;
        self.recv_owed = 0;
        self.idled = true;
        core::mem::replace(&mut self.qp, qp)
    }

    /// Credit every run with `status` and forget them.
    pub fn drain(&mut self, status: WcStatus, credit: &mut impl FnMut(u64, u32, WcStatus)) {
        while let Some((run, _)) = self.pop_front() {
            credit(run.id, run.count, status);
        }
        self.outstanding = 0;
        self.bytes_out = 0;
        self.idled = true;
    }

    /// No WQE staged or in flight here carries a sequence number older than this.
    #[inline]
    pub fn oldest_seq(&self) -> Option<Seq> {
        self.front().map(|r| r.seq)
    }

    /// True when a chain waits to be posted.
    #[inline]
    pub fn has_staged(&self) -> bool {
        self.staged_len != 0
    }

    /// True when another send WQE fits within `limit`.
    #[inline]
    pub fn has_room(&self) -> bool {
        self.has_room_for(1)
    }
}
