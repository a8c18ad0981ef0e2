//! Waiting on a peer without a busy core. Each side's loop polls its completion queue
//! and the control connection without blocking, and yields the core between rounds
//! that found nothing: that keeps a live peer's latency at the spin's. A peer that
//! stops (a stalled or stopped process) would keep that loop on a core for the whole
//! `--timeout`, so once nothing has moved for [`SPIN`] the loop sleeps between rounds
//! instead, for a nap that grows with the wait up to [`MAX_NAP`]: the first message
//! after the peer resumes is seen at most that late.

use std::time::Duration;

/// How long a side spins (yielding) with nothing moving before it starts to sleep.
pub const SPIN: Duration = Duration::from_millis(10);
/// The longest sleep between two rounds: the most a waiting side adds to the first
/// step of a peer that resumes. A wait of `w` past [`SPIN`] is overshot by at most
/// `w / 16`, so a slow but live peer loses about 6% of its gaps at worst; a stopped
/// one costs 200 rounds a second, well under 1% of a core.
pub const MAX_NAP: Duration = Duration::from_millis(5);

/// The pause after a round in which nothing moved, `idle` after the last thing that
/// did: a yield while `idle` is under [`SPIN`], else a sleep of a sixteenth of the
/// wait so far, at most [`MAX_NAP`].
pub fn nap(idle: Duration) -> Option<Duration> {
    (idle >= SPIN).then(|| (idle / 16).min(MAX_NAP))
}

/// Pauses after a round in which nothing moved (see [`nap`]).
pub fn pause(idle: Duration) {
    match nap(idle) {
        Some(d) => std::thread::sleep(d),
        None => std::thread::yield_now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_peer_is_spun_on_and_a_silent_one_slept_on_up_to_the_cap() {
        assert_eq!(nap(Duration::ZERO), None);
        assert_eq!(nap(SPIN - Duration::from_nanos(1)), None);
        assert_eq!(nap(SPIN), Some(SPIN / 16));
        assert_eq!(nap(Duration::from_secs(10)), Some(MAX_NAP));
    }
}
