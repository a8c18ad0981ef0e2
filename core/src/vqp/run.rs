//! What a physical QP's send WQEs are tracked as: runs (consecutive WQEs of one
//! virtual request), their fragment and byte figures, what a failed QP gives up for
//! re-dispatch, and the per-QP counters.

use crate::seq::Seq;

/// WQEs of one virtual request, consecutive on one QP. 16 bytes: what every policy
/// needs; the rest is in [`RunFigures`], beside it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pub id: u64,
    pub count: u32,
    /// The DQPLB sequence counter when the run started: no WQE of the run carries
    /// an older number (a numbered request's fragment `f` here carries
    /// `seq + (f − first)`).
    pub seq: Seq,
}

impl Run {
    pub(super) const EMPTY: Self = Self {
        id: 0,
        count: 0,
        seq: Seq::new(0),
    };
}

/// What a lane that weighs its load or tracks fragments keeps of each run, at the
/// run's index in a second array: plain round-robin never writes them (they stay
/// [`RunFigures::EMPTY`]), so its runs stay 16 bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunFigures {
    /// The request's fragment index of the run's first WQE, and the step between its
    /// fragments: what re-dispatch re-posts when the QP fails (kept exact only when
    /// the lane tracks them).
    pub first: u32,
    pub stride: u32,
    /// Bytes its WQEs carry (kept when the lane weighs its load).
    pub bytes: u64,
}

impl RunFigures {
    pub(super) const EMPTY: Self = Self {
        first: 0,
        stride: 1,
        bytes: 0,
    };
}

/// A run a failed QP gave up, with its fragments: what re-dispatch posts again.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Taken {
    pub id: u64,
    pub count: u32,
    pub seq: Seq,
    pub first: u32,
    pub stride: u32,
}

/// Per-QP counters, for tests, benches and monitoring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Send WQEs posted.
    pub wqes: u64,
    /// Bytes of the send WQEs handed to the QP: kept under a load-aware policy, with
    /// re-dispatch, or with [`Config::count_bytes`](super::Config::count_bytes); 0
    /// otherwise.
    pub bytes: u64,
    /// `post_send` calls (chains).
    pub chains: u64,
    /// Send completions received.
    pub cqes: u64,
    /// Receive WQEs posted.
    pub recvs: u64,
}

impl Taken {
    /// The run less its first `done` fragments.
    pub(super) fn after(self, done: u32) -> Taken {
        let skip = done.wrapping_mul(self.stride);
        Taken {
            count: self.count - done,
            first: self.first.wrapping_add(skip),
            seq: self.seq.add(skip),
            ..self
        }
    }
}
