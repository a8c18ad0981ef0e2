//! Tiny seeded generators: deterministic, dependency-free, good enough to pick QPs and
//! shuffle completions. SplitMix64 for the simulated NIC; a bare LCG for the no-op
//! provider, whose every draw is on a benchmark's clock.

/// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit state advanced by a Weyl sequence and
/// finalised by a bit mixer. Every seed, including 0, gives a full-period stream.
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose stream depends only on `seed`.
    pub(crate) const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`), by the multiply-high reduction; the bias is below
    /// 2^-32 for the small `n` used here.
    #[inline]
    pub(crate) fn below(&mut self, n: usize) -> usize {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// A 64-bit linear congruential generator (Knuth's MMIX constants), read from its top
/// 32 bits: a multiply and an add per draw, where [`SplitMix64`] mixes with two more
/// multiplies and three shifts. Its low bits are weak; only the top ones are used.
#[derive(Clone, Debug)]
pub(crate) struct Lcg64 {
    state: u64,
}

impl Lcg64 {
    /// A generator whose stream depends only on `seed`.
    pub(crate) const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A value in `0..n` (`0 < n ≤ 2^32`): the top 32 bits of the state, scaled by
    /// the multiply-high reduction (bias below `n`/2^32).
    #[inline]
    pub(crate) fn below(&mut self, n: usize) -> usize {
        debug_assert!(n > 0 && n as u64 <= 1 << 32);
        self.state = self
            .state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (((self.state >> 32) * n as u64) >> 32) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::{Lcg64, SplitMix64};

    #[test]
    fn same_seed_same_stream() {
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(SplitMix64::new(1).next_u64(), SplitMix64::new(2).next_u64());
    }

    #[test]
    fn known_first_value() {
        // The reference output of SplitMix64 for seed 0.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut r = SplitMix64::new(7);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let v = r.below(5);
            assert!(v < 5);
            seen[v] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn lcg_same_seed_same_picks_and_covers_the_range() {
        let (mut a, mut b) = (Lcg64::new(9), Lcg64::new(9));
        let mut seen = [0u32; 5];
        for _ in 0..1000 {
            let v = a.below(5);
            assert_eq!(v, b.below(5));
            seen[v] += 1;
        }
        // Each of 5 values about 200 times in 1000 draws.
        assert!(seen.iter().all(|&s| (150..250).contains(&s)), "{seen:?}");
        let firsts: Vec<usize> = (0..4).map(|s| Lcg64::new(s).below(1 << 16)).collect();
        assert!(firsts.windows(2).all(|w| w[0] != w[1]), "{firsts:?}");
    }
}
