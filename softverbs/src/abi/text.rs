//! Pure helpers of libibverbs: the static rate conversions and the fork-support
//! questions (the names of enumerations are in `strings`).

use core::ffi::{c_int, c_void};

/// `enum ibv_rate` value, its multiple of 2.5 Gb/s (where it is one) and its data rate
/// in Mb/s, as the InfiniBand specification's rate table gives them.
const RATES: [(c_int, Option<c_int>, c_int); 23] = [
    (2, Some(1), 2_500),        // 2.5 Gb/s
    (5, Some(2), 5_000),        // 5 Gb/s
    (3, Some(4), 10_000),       // 10 Gb/s
    (6, Some(8), 20_000),       // 20 Gb/s
    (4, Some(12), 30_000),      // 30 Gb/s
    (7, Some(16), 40_000),      // 40 Gb/s
    (8, Some(24), 60_000),      // 60 Gb/s
    (9, Some(32), 80_000),      // 80 Gb/s
    (10, Some(48), 120_000),    // 120 Gb/s
    (11, None, 14_062),         // 14 Gb/s (FDR lane)
    (12, None, 56_250),         // 56 Gb/s
    (13, None, 112_500),        // 112 Gb/s
    (14, None, 168_750),        // 168 Gb/s
    (15, None, 25_781),         // 25 Gb/s (EDR lane)
    (16, None, 103_125),        // 100 Gb/s
    (17, None, 206_250),        // 200 Gb/s
    (18, None, 309_375),        // 300 Gb/s
    (19, Some(11), 28_125),     // 28 Gb/s
    (20, Some(20), 53_125),     // 50 Gb/s
    (21, Some(160), 425_000),   // 400 Gb/s
    (22, Some(240), 637_500),   // 600 Gb/s
    (23, Some(320), 850_000),   // 800 Gb/s
    (24, Some(480), 1_275_000), // 1200 Gb/s
];

/// `IBV_RATE_MAX`: "the port's rate", what the reverse conversions return for a value
/// that names no rate.
pub const IBV_RATE_MAX: c_int = 0;

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s; -1 for a rate that is not
/// one (or no rate).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate)
        .and_then(|r| r.1)
        .unwrap_or(-1)
}

/// `mult_to_ibv_rate`: the rate that is `mult` × 2.5 Gb/s; `IBV_RATE_MAX` for none.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == Some(mult))
        .map_or(IBV_RATE_MAX, |r| r.0)
}

/// `ibv_rate_to_mbps`: the rate's data rate in Mb/s; -1 for no rate.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`: the rate whose data rate is exactly `mbps`; `IBV_RATE_MAX` for
/// none.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.2 == mbps)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

/// `enum ibv_fork_status`: fork support is off.
pub const IBV_FORK_DISABLED: c_int = 0;
/// `enum ibv_fork_status`: `ibv_fork_init` prepared it.
pub const IBV_FORK_ENABLED: c_int = 1;
/// `enum ibv_fork_status`: fork needs no preparation.
pub const IBV_FORK_UNNEEDED: c_int = 2;

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED`. Registration pins nothing and shares
/// no page with a device, so a child process gets ordinary copy-on-write copies of
/// registered memory (its copy of the provider has no devices open): the answer
/// rdma-core gives on kernels with copy-on-fork for pinned pages.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    IBV_FORK_UNNEEDED
}

/// `ibv_dontfork_range`: 0; there is no page to keep from a child (see
/// [`ibv_is_fork_initialized`]).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range`: 0, as [`ibv_dontfork_range`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_convert_both_ways() {
        // IBV_RATE_10_GBPS is 3: 4 × 2.5 Gb/s.
        assert_eq!(ibv_rate_to_mult(3), 4);
        assert_eq!(mult_to_ibv_rate(4), 3);
        assert_eq!(ibv_rate_to_mbps(3), 10_000);
        assert_eq!(mbps_to_ibv_rate(10_000), 3);
        // IBV_RATE_100_GBPS (16) is 4X EDR: not a multiple of 2.5 Gb/s.
        assert_eq!(ibv_rate_to_mult(16), -1);
        assert_eq!(ibv_rate_to_mbps(16), 103_125);
        assert_eq!(mbps_to_ibv_rate(103_125), 16);
        // No rate.
        assert_eq!(ibv_rate_to_mult(IBV_RATE_MAX), -1);
        assert_eq!(ibv_rate_to_mbps(99), -1);
        assert_eq!(mult_to_ibv_rate(3), IBV_RATE_MAX);
        assert_eq!(mbps_to_ibv_rate(1), IBV_RATE_MAX);
        // Every rate round-trips through its Mb/s, and through its multiple if any.
        for (rate, mult, mbps) in RATES {
            assert_eq!(mbps_to_ibv_rate(ibv_rate_to_mbps(rate)), rate);
            if let Some(m) = mult {
                assert_eq!(mult_to_ibv_rate(ibv_rate_to_mult(rate)), rate);
                assert_eq!(ibv_rate_to_mult(rate), m);
            }
            assert_eq!(ibv_rate_to_mbps(rate), mbps);
        }
    }

    #[test]
    fn fork_needs_no_preparation() {
        assert_eq!(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
        let mut page = [0u8; 64];
        assert_eq!(ibv_dontfork_range(page.as_mut_ptr().cast(), 64), 0);
        assert_eq!(ibv_dofork_range(page.as_mut_ptr().cast(), 64), 0);
    }
}
