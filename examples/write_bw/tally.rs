//! What a run whose virtual QP failed counted, told alike by both sides.
//!
//! The client sees every request's completion, so it keeps the count: the messages
//! that completed in order before the first failure (the prefix, which the server can
//! check), the later ones that still completed, and those flushed. It sends the server
//! all of them (`control`'s `P`, `L`, `U` and `X` frames), and each side's error line
//! carries [`Tally`]'s one phrase, so the two lines say the same numbers.

use crate::control::{Control, FLUSHED, LATER, POSTED, QP_FAILED};

/// The client's count of a failed run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Messages 0 to prefix − 1 all completed successfully: the first failure is
    /// message `prefix` (or none had failed when the run stopped).
    pub prefix: u64,
    /// Messages after the first failure that still completed successfully (on data
    /// QPs that had not failed).
    pub later: u64,
    /// Messages that completed with an error: the first failure and those flushed
    /// with it.
    pub flushed: u64,
    /// Messages posted in all; those not in the three counts above were not reported
    /// before the client gave up waiting.
    pub posted: u64,
}

impl Tally {
    /// Messages posted that no completion reported.
    pub fn unreported(&self) -> u64 {
        self.posted
            .saturating_sub(self.prefix)
            .saturating_sub(self.later)
            .saturating_sub(self.flushed)
    }

    /// Sends the count to the server: `P`, `L` and `U`, then `X` with the prefix,
    /// which closes it. Errors are the caller's to ignore or not.
    pub fn send(&self, ctl: &mut Control) -> Result<(), crate::Fail> {
        ctl.send(POSTED, self.posted)?;
        ctl.send(LATER, self.later)?;
        ctl.send(FLUSHED, self.flushed)?;
        ctl.send(QP_FAILED, self.prefix)
    }
}

impl std::fmt::Display for Tally {
    /// `150 messages (of 190 posted, 3 completed after the first failure and 37
    /// were flushed)`, with `, N were not reported` when some were not.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} messages (of {} posted, {} completed after the first failure and {} were flushed",
            self.prefix, self.posted, self.later, self.flushed
        )?;
        match self.unreported() {
            0 => write!(f, ")"),
            n => write!(f, "; {n} were not reported)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phrase_names_every_count_and_the_unreported_rest() {
        let t = Tally {
            prefix: 150,
            later: 3,
            flushed: 37,
            posted: 190,
        };
        assert_eq!(
            t.to_string(),
            "150 messages (of 190 posted, 3 completed after the first failure and 37 were flushed)"
        );
        let t = Tally { posted: 200, ..t };
        assert_eq!(t.unreported(), 10);
        assert!(t
            .to_string()
            .ends_with("37 were flushed; 10 were not reported)"));
    }
}
