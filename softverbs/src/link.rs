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
//!
//! A rated port also *reports* its rate, as a trained link does: `ibv_query_port` gives
//! the InfiniBand width and lane speed nearest to it ([`port_speed`]).

use std::cmp::Ordering as CmpOrdering;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::os::lock;

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

/// `(active_width, active_speed)` of an unlimited port: 4X EDR, 100 Gb/s.
pub(crate) const UNLIMITED_PORT: (u8, u8) = (2, 32);

/// `active_width` codes and their lanes, in the order that settles a choice between
/// equal products: 4X first (the width InfiniBand ports are built with, which a ConnectX
/// port keeps while training its lanes slower), then the fewest lanes.
///
/// The codes are `enum ibv_port_width` of rdma-core's `verbs.h` (1X = 1, 4X = 2, 8X = 4,
/// 12X = 8, 2X = 16), the IB specification's PortInfo `LinkWidthActive` encoding, in
/// which ConnectX reports its trained link.
const WIDTHS: [(u8, u64); 5] = [(2, 4), (1, 1), (16, 2), (4, 8), (8, 12)];

/// One `active_speed`: its code, its lane rate in bits per second (the figure a rate is
/// matched against), its lane rate in units of 100 Mb/s and its name (as the kernel's
/// `ib_port_attr_to_speed_info` and sysfs `rate` give them).
struct LaneSpeed {
    code: u8,
    bits: u64,
    deci_gbps: u64,
    name: &'static str,
}

impl LaneSpeed {
    const fn new(code: u8, bits: u64, deci_gbps: u64, name: &'static str) -> LaneSpeed {
        LaneSpeed {
            code,
            bits,
            deci_gbps,
            name,
        }
    }
}

/// `active_speed` codes: `enum ibv_port_speed` of rdma-core's `verbs.h` (the kernel's
/// `enum ib_port_speed`), which folds the IB specification's PortInfo `LinkSpeedActive`
/// (SDR, DDR, QDR) and `LinkSpeedExtActive` (FDR and faster) into one bit per speed;
/// ConnectX reports its trained link this way. EDR counts its nominal 25 Gb/s (its lanes
/// signal at 25.78125); FDR10 (8, 10.3125 Gb/s) is left out, so 10 Gb/s lanes are QDR.
const SPEEDS: [LaneSpeed; 7] = [
    LaneSpeed::new(1, 2_500_000_000, 25, "SDR"),
    LaneSpeed::new(2, 5_000_000_000, 50, "DDR"),
    LaneSpeed::new(4, 10_000_000_000, 100, "QDR"),
    LaneSpeed::new(16, 14_062_500_000, 140, "FDR"),
    LaneSpeed::new(32, 25_000_000_000, 250, "EDR"),
    LaneSpeed::new(64, 50_000_000_000, 500, "HDR"),
    LaneSpeed::new(128, 100_000_000_000, 1000, "NDR"),
];

/// The `(active_width, active_speed)` that `ibv_query_port` reports for a link of
/// `bytes_per_sec`, so that a program reading its ports tells links of different
/// speeds apart as on hardware: the pair whose rate (lanes × lane speed) is nearest to
/// `8 · bytes_per_sec` bits/s in log scale, the faster of two as near, and among pairs
/// of one rate the first width of [`WIDTHS`] (1 GB/s: 4X SDR, 10 Gb/s; 3 GB/s: 1X EDR,
/// 25 Gb/s; below 2.5 Gb/s: 1X SDR, the slowest there is). Unlimited (0):
/// [`UNLIMITED_PORT`], 4X EDR.
pub(crate) fn port_speed(bytes_per_sec: u64) -> (u8, u8) {
    if bytes_per_sec == 0 {
        return UNLIMITED_PORT;
    }
    let pairs = WIDTHS.iter().flat_map(|&(width, lanes)| {
        SPEEDS
            .iter()
            .map(move |s| ((width, s.code), u128::from(lanes) * u128::from(s.bits)))
    });
    nearest(u128::from(bytes_per_sec) * 8, pairs).unwrap_or(UNLIMITED_PORT)
}

/// The candidate whose rate is nearest to `target` in log scale (the least
/// `max(rate, target) / min(rate, target)`); the faster on a tie, the first of equal
/// rates. `None` for no candidates.
fn nearest<T>(target: u128, candidates: impl IntoIterator<Item = (T, u128)>) -> Option<T> {
    let mut best: Option<(T, u128)> = None;
    for (c, rate) in candidates {
        let better = match &best {
            None => true,
            Some((_, b)) => match log_distance_cmp(rate, *b, target) {
                CmpOrdering::Less => true,
                CmpOrdering::Equal => rate > *b,
                CmpOrdering::Greater => false,
            },
        };
        if better {
            best = Some((c, rate));
        }
    }
    best.map(|(c, _)| c)
}

/// Compares how far rates `a` and `b` are from `target` in log scale, exactly: the
/// ratio `max(x, t) / min(x, t)` of each, cross-multiplied (a `u64` bytes/s target is
/// below 2^68 bits/s and a port's rate below 2^41, so the products fit).
fn log_distance_cmp(a: u128, b: u128, target: u128) -> CmpOrdering {
    let ratio = |x: u128| (x.max(target), x.min(target));
    let ((an, ad), (bn, bd)) = (ratio(a), ratio(b));
    an.saturating_mul(bd).cmp(&bn.saturating_mul(ad))
}

/// The lanes of `active_width` code `width` and the [`SPEEDS`] entry of `active_speed`
/// code `speed`; SDR for a speed this module does not report, as the kernel does.
fn decode(width: u8, speed: u8) -> (u64, &'static LaneSpeed) {
    let lanes = WIDTHS
        .iter()
        .find(|&&(w, _)| w == width)
        .map_or(1, |&(_, l)| l);
    let s = SPEEDS
        .iter()
        .find(|s| s.code == speed)
        .unwrap_or(&SPEEDS[0]);
    (lanes, s)
}

/// The rate of a port reporting `(width, speed)`, in units of 100 Mb/s, as the kernel
/// computes it for `ibv_query_port_speed` (lanes × nominal lane rate: 4X EDR is 1000).
pub(crate) fn port_speed_deci_gbps((width, speed): (u8, u8)) -> u64 {
    let (lanes, s) = decode(width, speed);
    lanes * s.deci_gbps
}

/// The text of sysfs `ports/1/rate` for `(width, speed)`, the kernel's format:
/// `100 Gb/sec (4X EDR)`, `2.5 Gb/sec (1X SDR)`.
pub(crate) fn port_rate_text(port: (u8, u8)) -> String {
    let rate = port_speed_deci_gbps(port);
    let (lanes, s) = decode(port.0, port.1);
    let half = if rate % 10 != 0 { ".5" } else { "" };
    format!("{}{half} Gb/sec ({lanes}X {})", rate / 10, s.name)
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
    fn a_rate_reports_the_nearest_width_and_speed() {
        // 1 GB/s = 8 Gb/s: 4X SDR (10 Gb/s), not 1X QDR or 2X DDR of the same rate.
        assert_eq!(port_speed(1_000_000_000), (2, 1));
        // 3 GB/s = 24 Gb/s: 1X EDR (25 Gb/s).
        assert_eq!(port_speed(3_000_000_000), (1, 32));
        // 100 MB/s = 0.8 Gb/s, and 1 B/s: 1X SDR (2.5 Gb/s), the slowest there is.
        assert_eq!(port_speed(100_000_000), (1, 1));
        assert_eq!(port_speed(1), (1, 1));
        // 5 GB/s = 40 Gb/s: 4X QDR; 6.25 GB/s = 50 Gb/s: no 4X pair, the fewest lanes
        // (1X HDR, not 2X EDR); 12.5 GB/s = 100 Gb/s: 4X EDR, as unlimited.
        assert_eq!(port_speed(5_000_000_000), (2, 4));
        assert_eq!(port_speed(6_250_000_000), (1, 64));
        assert_eq!(port_speed(12_500_000_000), (2, 32));
        // 1.75 GB/s = 14 Gb/s: 1X FDR (14.0625), nearer than 4X SDR (10).
        assert_eq!(port_speed(1_750_000_000), (1, 16));
        // Beyond the fastest: 12X NDR (1200 Gb/s); no overflow at the top.
        assert_eq!(port_speed(1_000_000_000_000), (8, 128));
        assert_eq!(port_speed(u64::MAX), (8, 128));
        // Every pair's own rate reports a pair of that rate.
        for &(_, lanes) in &WIDTHS {
            for s in &SPEEDS {
                let bits = lanes * s.bits;
                let (w, sp) = port_speed(bits / 8);
                let (l, got) = decode(w, sp);
                assert_eq!(l * got.bits, bits, "{lanes}X {}", s.name);
            }
        }
    }

    #[test]
    fn an_unlimited_port_is_4x_edr() {
        assert_eq!(port_speed(0), (2, 32));
        assert_eq!(port_speed_deci_gbps(port_speed(0)), 1000);
        assert_eq!(port_rate_text(port_speed(0)), "100 Gb/sec (4X EDR)");
    }

    #[test]
    fn the_faster_wins_a_tie_and_the_first_an_equal_rate() {
        // 20 is as far from 10 as from 40 in log scale.
        assert_eq!(log_distance_cmp(10, 40, 20), CmpOrdering::Equal);
        assert_eq!(log_distance_cmp(15, 40, 20), CmpOrdering::Less);
        assert_eq!(nearest(20, [("slow", 10), ("fast", 40)]), Some("fast"));
        assert_eq!(nearest(20, [("fast", 40), ("slow", 10)]), Some("fast"));
        assert_eq!(nearest(20, [("a", 40), ("b", 40)]), Some("a"));
        assert_eq!(nearest(20, [("x", 1); 0]), None);
    }

    #[test]
    fn speeds_convert_as_the_kernel_does() {
        assert_eq!(port_speed_deci_gbps((1, 1)), 25);
        assert_eq!(port_speed_deci_gbps((2, 16)), 560);
        assert_eq!(port_speed_deci_gbps((8, 128)), 12_000);
        assert_eq!(port_rate_text((1, 1)), "2.5 Gb/sec (1X SDR)");
        assert_eq!(port_rate_text((2, 1)), "10 Gb/sec (4X SDR)");
        assert_eq!(port_rate_text((1, 32)), "25 Gb/sec (1X EDR)");
        assert_eq!(port_rate_text((16, 1)), "5 Gb/sec (2X SDR)");
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
