//! How a virtual QP is configured.

use core::fmt;

use super::policy::Policy;
use crate::split::{SplitError, SplitPolicy};
use crate::wr::MAX_DEVICES;

const _: () = assert!(MAX_DEVICES == 4, "Config::weights has one entry per device");

/// How the receiver learns that a fragmented RDMA_WRITE_WITH_IMM has landed.
///
/// InfiniBand adaptive routing does not spread WRITE_WITH_IMM packets, so `Spray`
/// (plain writes plus one notify) suits adaptive-routing fabrics and `Dqplb`
/// (every fragment a WRITE_WITH_IMM carrying a sequence number) suits the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Fragments are plain writes; a zero-byte WRITE_WITH_IMM with the user's
    /// immediate follows on the notify QP once they all completed.
    Spray,
    /// Every fragment is a WRITE_WITH_IMM whose immediate carries a 24-bit sequence
    /// number and, on the last fragment, the notify bit. No room for the user's
    /// immediate: use `Spray` when you need it.
    Dqplb,
}

/// Which send WQEs ask for a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signaling {
    /// Only the last WQE of each per-QP chain (and pass-through requests the
    /// application signaled): per-QP completion order releases the rest.
    LastOfChain,
    /// Every WQE.
    Every,
}

/// A virtual QP's settings; both ends must agree on `mode`, the split policy's
/// `max_frag`, the depths and the initial sequence numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Load-balancing mode.
    pub mode: Mode,
    /// How requests are cut.
    pub split: SplitPolicy,
    /// Send WQEs in flight per physical QP (at most the type's `D`).
    pub max_outstanding: u32,
    /// Receives kept posted per physical QP that receives (at most 2^24).
    pub recv_depth: u32,
    /// Which WQEs are signaled.
    pub signaling: Signaling,
    /// First DQPLB sequence number this side sends.
    pub send_seq: u32,
    /// First DQPLB sequence number this side expects (the peer's `send_seq`).
    pub recv_seq: u32,
    /// The number reported in [`Wc::qp_num`](crate::Wc::qp_num).
    pub qp_num: u32,
    /// How fragments are spread over the data QPs; each side chooses its own.
    pub policy: Policy,
    /// Relative weight of each device's data QPs under the weighted policies (the
    /// adaptive one starts from them); at least 1 for every device in use.
    /// (The length is [`MAX_DEVICES`] written out: a constant path there trips rustc
    /// 1.95 when a `Config` is captured by a closure.)
    pub weights: [u32; 4],
    /// The most data QPs one request's fragments use (0: all of them). A request of
    /// `k` fragments uses at most `min(k, fanout)`.
    pub fanout: u8,
    /// Survive a data QP's failure: post its fragments that did not complete on the
    /// QPs that remain and go on with them (see `vqp::failover`). Off: any QP's
    /// failure fails the virtual QP, as before.
    pub redispatch: bool,
    /// Keep [`LaneStats::bytes`](super::LaneStats::bytes), each data QP's count of
    /// the bytes handed to it, under round-robin without re-dispatch too (the other
    /// policies and re-dispatch keep it anyway, as they read it). Off by default: on
    /// the striping path it is an add per run of fragments.
    pub count_bytes: bool,
    /// With re-dispatch, how long the virtual QP holds its requests once every data
    /// QP has failed, waiting for [`VirtualQp::restore`](super::VirtualQp::restore),
    /// in nanoseconds of the clock [`VirtualQp::sample`](super::VirtualQp::sample)
    /// is given (0: it fails at once, as without re-dispatch).
    pub grace_ns: u64,
    /// How often the adaptive policy folds in what it measured, in nanoseconds
    /// (calls of [`VirtualQp::sample`](super::VirtualQp::sample) closer together
    /// than this do nothing).
    pub adapt_ns: u64,
}

impl Config {
    /// DQPLB, 64 KiB fragments, 64 WQEs per QP, selective signaling.
    pub const fn new(mode: Mode) -> Self {
        Self {
            mode,
            split: SplitPolicy::new(64 << 10),
            max_outstanding: 64,
            recv_depth: 64,
            signaling: Signaling::LastOfChain,
            send_seq: 0,
            recv_seq: 0,
            qp_num: 0,
            policy: Policy::RoundRobin,
            weights: [1; 4],
            fanout: 0,
            redispatch: false,
            count_bytes: false,
            grace_ns: 0,
            adapt_ns: 2_000_000,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self::new(Mode::Dqplb)
    }
}

/// A virtual QP could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// No data QP was given, or more than the type's capacity `N`.
    DataQps {
        /// How many were given.
        given: usize,
        /// The type's capacity.
        capacity: usize,
    },
    /// SPRAY with more than one data QP needs a notify QP; other set-ups take none.
    NotifyQp {
        /// Whether one was given.
        given: bool,
    },
    /// `max_outstanding` is 0 or above the type's per-QP capacity `D`.
    MaxOutstanding {
        /// The value given.
        given: u32,
        /// The type's capacity.
        capacity: usize,
    },
    /// `recv_depth` is 0 or above 2^24.
    RecvDepth(u32),
    /// A device index is not below [`MAX_DEVICES`].
    Device(u8),
    /// The split policy is unusable.
    Split(SplitError),
    /// A device with data QPs has weight 0.
    Weight(u8),
    /// A DQPLB receiver holds up to `data QPs × recv_depth` messages that arrived
    /// before any receive waited for them: the type's `S` must be at least that.
    Slots {
        /// The type's slot count.
        slots: usize,
        /// What this configuration needs.
        needed: u64,
    },
    /// DQPLB's reorder window `W` must hold every receive the peer may leave
    /// unprocessed plus every fragment in flight: `data QPs × (recv_depth +
    /// max_outstanding)`.
    Window {
        /// The type's window.
        window: usize,
        /// What this configuration needs.
        needed: u64,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::DataQps { given, capacity } => {
                write!(
                    f,
                    "{given} data QPs given; between 1 and {capacity} allowed"
                )
            }
            Self::NotifyQp { given: false } => {
                f.write_str("SPRAY with more than one data QP needs a notify QP")
            }
            Self::NotifyQp { given: true } => {
                f.write_str("a notify QP is used only in SPRAY mode with more than one data QP")
            }
            Self::MaxOutstanding { given, capacity } => {
                write!(
                    f,
                    "max_outstanding {given}; between 1 and {capacity} allowed"
                )
            }
            Self::RecvDepth(d) => write!(f, "recv_depth {d}; between 1 and 2^24 allowed"),
            Self::Device(d) => write!(f, "device index {d}; below {} allowed", crate::MAX_DEVICES),
            Self::Split(e) => e.fmt(f),
            Self::Weight(d) => write!(f, "device {d} carries data QPs but has weight 0"),
            Self::Slots { slots, needed } => write!(
                f,
                "{slots} request slots are below data QPs × recv_depth = {needed}"
            ),
            Self::Window { window, needed } => write!(
                f,
                "reorder window of {window} is below data QPs × (recv_depth + max_outstanding) = {needed}"
            ),
        }
    }
}

impl core::error::Error for BuildError {}
