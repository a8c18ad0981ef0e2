//! Cutting a request into fragments.
//!
//! Fragment count is `ceil(len / step)`, fragment `i` covers
//! `[i·step, min(len, (i+1)·step))`, where `step` is `max_frag` (rounded down to the
//! alignment when one is set). With an alignment `A`, the first fragment is shortened
//! so that every later fragment starts on a remote address that is a multiple of `A`.
//! Requests no longer than the no-split threshold travel whole.

use core::fmt;

/// How requests are cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitPolicy {
    /// Largest fragment in bytes.
    pub max_frag: u32,
    /// Fragment boundaries fall on remote addresses that are multiples of this
    /// (a power of two, at most `max_frag`); 1 for none.
    pub align: u32,
    /// Requests of at most this many bytes are not split (they go whole to one QP,
    /// up to the largest single WQE, 2^31 bytes).
    pub no_split_below: u32,
}

/// A split policy that cannot work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitError {
    /// `max_frag` is zero or above the largest fragment the receiver can track.
    MaxFrag(u32),
    /// `align` is not a power of two no larger than `max_frag`.
    Align(u32),
}

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MaxFrag(m) => write!(f, "max_frag {m} must be between 1 and 2^30 - 1"),
            Self::Align(a) => write!(f, "alignment {a} must be a power of two ≤ max_frag"),
        }
    }
}

impl core::error::Error for SplitError {}

/// The largest single WQE verbs accepts.
pub const MAX_WQE_BYTES: u64 = 1 << 31;

impl SplitPolicy {
    /// `max_frag`-byte fragments, no alignment, always split.
    pub const fn new(max_frag: u32) -> Self {
        Self {
            max_frag,
            align: 1,
            no_split_below: 0,
        }
    }

    /// Check the policy's values.
    pub const fn validate(&self) -> Result<(), SplitError> {
        if self.max_frag == 0 || self.max_frag > crate::reorder::MAX_FRAGMENT {
            return Err(SplitError::MaxFrag(self.max_frag));
        }
        if !self.align.is_power_of_two() || self.align > self.max_frag {
            return Err(SplitError::Align(self.align));
        }
        Ok(())
    }

    /// The plan for `len` bytes going to `remote_addr`.
    #[inline]
    pub fn plan(&self, len: u64, remote_addr: u64) -> Plan {
        if len <= u64::from(self.no_split_below) && len <= MAX_WQE_BYTES {
            return Plan::whole(len);
        }
        let step = u64::from(self.max_frag & !(self.align - 1));
        let misalign = remote_addr & u64::from(self.align - 1);
        let first = step - misalign;
        let count = if len <= first {
            1
        } else {
            1 + (len - first).div_ceil(step)
        };
        Plan {
            len,
            first,
            step,
            count,
        }
    }
}

/// Where a request's fragments fall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    len: u64,
    first: u64,
    step: u64,
    count: u64,
}

impl Plan {
    /// One fragment covering the whole request.
    pub const fn whole(len: u64) -> Self {
        Self {
            len,
            first: len,
            step: len,
            count: 1,
        }
    }

    /// How many fragments.
    #[inline]
    pub const fn count(&self) -> u64 {
        self.count
    }

    /// `(origin, step)`: fragment `i` starts at `origin + i·step` (wrapping) and is
    /// `step` long, for every fragment but a shortened first one and the last one.
    #[inline]
    pub const fn grid(&self) -> (u64, u64) {
        (self.first.wrapping_sub(self.step), self.step)
    }

    /// The length of fragment `i`, which starts at `offset` (the sum of the lengths
    /// before it): what [`Plan::fragment`] gives, without a multiplication.
    #[inline]
    pub fn next_len(&self, i: u64, offset: u64) -> u32 {
        let step = if i == 0 { self.first } else { self.step };
        step.min(self.len - offset) as u32
    }

    /// Fragment `i`'s offset in the request and its length.
    #[inline]
    pub fn fragment(&self, i: u64) -> (u64, u32) {
        debug_assert!(i < self.count);
        let offset = if i == 0 {
            0
        } else {
            self.first + (i - 1) * self.step
        };
        let end = if i == 0 {
            self.first
        } else {
            offset + self.step
        };
        (offset, (end.min(self.len) - offset) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers(policy: SplitPolicy, len: u64, remote: u64) -> Plan {
        let plan = policy.plan(len, remote);
        let mut at = 0;
        for i in 0..plan.count() {
            let (off, l) = plan.fragment(i);
            assert_eq!(off, at, "fragment {i} of {plan:?}");
            assert_eq!(plan.next_len(i, at), l);
            assert!(l > 0 || len == 0);
            assert!(l <= policy.max_frag || plan.count() == 1);
            at += u64::from(l);
            if i > 0 {
                assert_eq!((remote + off) % u64::from(policy.align), 0);
            }
        }
        assert_eq!(at, len);
        plan
    }

    #[test]
    fn count_is_ceil_of_len_over_max_frag() {
        let p = SplitPolicy::new(64 << 10);
        assert_eq!(covers(p, 1 << 20, 0).count(), 16);
        assert_eq!(covers(p, (1 << 20) + 1, 0).count(), 17);
        assert_eq!(covers(p, 1, 0).count(), 1);
        assert_eq!(covers(p, 64 << 10, 0).count(), 1);
    }

    #[test]
    fn alignment_shortens_the_first_fragment_only() {
        let p = SplitPolicy {
            max_frag: 1000,
            align: 128,
            no_split_below: 0,
        };
        let plan = covers(p, 5000, 0x1010);
        assert_eq!(plan.fragment(0), (0, 896 - 16));
        assert_eq!(plan.fragment(1).1, 896);
    }

    #[test]
    fn small_requests_go_whole() {
        let p = SplitPolicy {
            max_frag: 4096,
            align: 1,
            no_split_below: 16384,
        };
        assert_eq!(covers(p, 16384, 0).count(), 1);
        assert_eq!(covers(p, 16385, 0).count(), 5);
    }

    #[test]
    fn bad_policies_are_refused() {
        assert_eq!(SplitPolicy::new(0).validate(), Err(SplitError::MaxFrag(0)));
        let p = SplitPolicy {
            max_frag: 100,
            align: 3,
            no_split_below: 0,
        };
        assert_eq!(p.validate(), Err(SplitError::Align(3)));
    }
}
