//! Link rates: a device's port carries so many bytes per second, so that striping
//! policies can be measured against links of different speeds on one machine.
//!
//! The rate shapes *when a WQE completes*, as a link would, not how fast memory is
//! copied: each device keeps the instant its link is next free; a WQE of `n` bytes
//! leaving through it reserves `[max(now, free), +n / rate)` and executes (copies its
//! data, completes) at the end of that span. WQEs of every QP on the device share the
//! link in the order they reach it; a WQE is reserved once (an RNR retry does not pay
//! again). The requester's device is the link, whatever the direction of the data (a
//! port's two directions run at the same rate). Rates are per process: each process's
//! copy of a device shapes what its own QPs send.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cq::lock;

/// One device's link: its rate and when it is next free.
#[derive(Debug, Default)]
pub(crate) struct Link {
    /// Bytes per second; 0 for unlimited.
    rate: AtomicU64,
    free_at: Mutex<Option<Instant>>,
}

impl Link {
    /// Sets the rate (0: unlimited). Reservations already made stand.
    pub(crate) fn set_rate(&self, bytes_per_sec: u64) {
        self.rate.store(bytes_per_sec, Ordering::Relaxed);
    }

    /// The rate (0: unlimited).
    pub(crate) fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Reserves the link for `len` bytes leaving at `now`; returns when they will have
    /// crossed it, or `None` when the link is unlimited (or nothing crosses it).
    #[inline]
    pub(crate) fn reserve(&self, len: u64, now: Instant) -> Option<Instant> {
        let rate = self.rate();
        if rate == 0 || len == 0 {
            return None;
        }
        let span = Duration::from_nanos(
            (u128::from(len) * 1_000_000_000 / u128::from(rate)).min(u128::from(u64::MAX)) as u64,
        );
        let mut free = lock(&self.free_at);
        let start = free.map_or(now, |f| f.max(now));
        let end = start + span;
        *free = Some(end);
        Some(end)
    }
}

/// Parses a rate: bytes per second, with an optional decimal `K`, `M`, `G` or `T`
/// suffix (`1G` = 10^9 bytes/s, `0.5G` = 5·10^8); `0` means unlimited.
pub fn parse_rate(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'K' | 'k') => (&s[..i], 1e3),
        (i, 'M' | 'm') => (&s[..i], 1e6),
        (i, 'G' | 'g') => (&s[..i], 1e9),
        (i, 'T' | 't') => (&s[..i], 1e12),
        _ => (s, 1.0),
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0 && v * mult < 1.8e19).then_some((v * mult) as u64)
}

/// Parses `VQP_SOFT_RATE`: comma-separated `DEVICE=RATE`, the device as `softN` or
/// `N` (`soft0=1G,soft1=3G`).
pub(crate) fn parse_rates(s: &str) -> Option<Vec<(usize, u64)>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (dev, rate) = p.split_once('=')?;
            let dev = dev.trim();
            let index = dev.strip_prefix("soft").unwrap_or(dev).parse().ok()?;
            Some((index, parse_rate(rate)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_decimal_suffixes() {
        assert_eq!(parse_rate("1G"), Some(1_000_000_000));
        assert_eq!(parse_rate("0.5G"), Some(500_000_000));
        assert_eq!(parse_rate("250M"), Some(250_000_000));
        assert_eq!(parse_rate("4096"), Some(4096));
        assert_eq!(parse_rate("0"), Some(0));
        assert_eq!(parse_rate("-1G"), None);
        assert_eq!(parse_rate("fast"), None);
        assert_eq!(
            parse_rates("soft0=1G, soft1=3G"),
            Some(vec![(0, 1_000_000_000), (1, 3_000_000_000)])
        );
        assert_eq!(parse_rates("2=1K"), Some(vec![(2, 1000)]));
        assert_eq!(parse_rates("soft0"), None);
    }

    #[test]
    fn reservations_queue_on_the_link_at_its_rate() {
        let l = Link::default();
        let t0 = Instant::now();
        assert_eq!(l.reserve(1000, t0), None, "unlimited");
        l.set_rate(1_000_000); // 1 MB/s: 1000 bytes take 1 ms
        let a = l.reserve(1000, t0).unwrap();
        assert_eq!(a - t0, Duration::from_millis(1));
        // The next one waits for the link to be free.
        let b = l.reserve(2000, t0).unwrap();
        assert_eq!(b - t0, Duration::from_millis(3));
        // One that arrives after the link went idle starts at once.
        let later = t0 + Duration::from_millis(10);
        assert_eq!(
            l.reserve(500, later).unwrap() - later,
            Duration::from_micros(500)
        );
        assert_eq!(l.reserve(0, later), None, "nothing crosses");
    }
}
