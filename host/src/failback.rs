//! Fail-back's messages: how two sides replace a failed QP — a data QP, or SPRAY's
//! notify QP — with a fresh pair, over a channel that does not depend on the failed
//! QPs (the TCP connection the cards went over, kept open; the application carries
//! the 8-byte messages).
//!
//! Three messages, as the RDMA CM connects a QP (REQ, REP, RTU), so that neither side
//! sends to a QP the other cannot yet receive on:
//!
//! ```text
//!  A (starts)                                  B
//!  old QP out, drained; fresh QP → INIT,
//!  receives posted
//!  ── Offer { lane, qpn, seen } ────────────►  old QP out, drained; fresh QP → INIT,
//!                                              receives posted, → RTR → RTS, not yet
//!                                              sending
//!  ◄─────────────── Answer { lane, qpn, seen } ─
//!  → RTR → RTS, sending                        
//!  ── Ready { lane } ───────────────────────►  sending
//! ```
//!
//! `seen` is how many of the peer's receive-consuming WQEs the sender's old QP
//! received (vqp-core's `receives_seen`, `notifies_seen`), for the QPs whose WQEs
//! consume the peer's receives (SPRAY's notify QP, data QP 0 of a SPRAY or one-QP
//! virtual QP; 0 for the others): the peer then posts again exactly those that did
//! not land. A side can only say so once its old QP's receives have all completed,
//! so before offering or answering it takes its old QP out (if it still ran) and
//! waits for them to flush; an offer that comes meanwhile is refused, and the
//! offering side offers again later.
//!
//! Either side may start, for any failed QP, at any time. When both offer for the
//! same QP at once, the offer with the lower QP number wins (on a tie, the side whose
//! card's first sequence number is lower): its sender ignores the other's offer, the
//! other answers with the QP it had offered. A side that cannot replace its QP
//! (re-dispatch off, its virtual QP failed, receives still flushing) answers
//! `Refuse`, and the offering side's QP stays failed (it may offer again later).
//! Capability [`FAIL_BACK`](crate::Capabilities::FAIL_BACK) in the endpoint card
//! says a side speaks this.
//!
//! A replacement's first PSN is not sent but follows from its QP number
//! ([`first_psn`]), to leave room for the count: the PSN guards an RC QP against
//! stale packets, which a fresh QP number already does, and is no secret.
//!
//! A notify QP's replacement goes on the device of the old one, or, while that one's
//! port is down, on another device that has a data QP: the Offer or Answer says on
//! which port ([`notify_lane`]).
//!
//! Wire format, 8 bytes: the kind (1 Offer, 2 Answer, 3 Ready, 4 Refuse), the data
//! QP index ([`NOTIFY_QP`], or [`notify_lane`] in an Offer or Answer, for the notify
//! QP), the QP number (24 bits, big-endian),
//! `seen` modulo 2^24 (big-endian); Ready and Refuse carry zeros in the last six bytes.

use std::fmt;

/// The length of an encoded message.
pub const MESSAGE_LEN: usize = 8;

/// The lane that names the SPRAY notify QP (data QP indexes are below it). In an
/// Offer or Answer, the lanes just below it name it too, and say which of the
/// sender's ports (card order) its replacement is on: [`notify_lane`].
pub const NOTIFY_QP: u8 = u8::MAX;

/// The lane an Offer or Answer for the notify QP carries when the sender's
/// replacement is on its port `port` (< [`MAX_PORTS`](crate::card::MAX_PORTS)).
pub fn notify_lane(port: u8) -> u8 {
    NOTIFY_QP - port
}

/// The sender's port of a notify QP's replacement, when `lane` names the notify QP
/// (see [`notify_lane`]); `None` for a data QP's lane.
pub fn notify_port(lane: u8) -> Option<u8> {
    let port = NOTIFY_QP - lane;
    (usize::from(port) < crate::card::MAX_PORTS).then_some(port)
}

/// The first PSN of a replacement QP, which its offer or answer does not carry: the
/// QP number mixed into 24 bits.
pub fn first_psn(qpn: u32) -> u32 {
    qpn.wrapping_mul(0x9e37_79b1) >> 8
}

const MAX_24BIT: u32 = (1 << 24) - 1;

/// One fail-back message (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailBack {
    /// The sender replaced its QP `lane` with a QP in INIT, its receives posted:
    /// replace yours and answer.
    Offer {
        /// The data QP's index, or [`NOTIFY_QP`].
        lane: u8,
        /// The replacement's QP number.
        qpn: u32,
        /// The peer's receive-consuming WQEs the sender's old QP received (mod 2^24).
        seen: u32,
    },
    /// The sender's replacement of QP `lane` is at RTS and receiving: connect yours,
    /// send, and say Ready.
    Answer {
        /// The data QP's index, or [`NOTIFY_QP`].
        lane: u8,
        /// The replacement's QP number.
        qpn: u32,
        /// The peer's receive-consuming WQEs the sender's old QP received (mod 2^24).
        seen: u32,
    },
    /// The sender's replacement of QP `lane` is at RTS and receiving.
    Ready {
        /// The data QP's index, or [`NOTIFY_QP`].
        lane: u8,
    },
    /// The sender cannot replace its QP `lane` (now).
    Refuse {
        /// The data QP's index, or [`NOTIFY_QP`].
        lane: u8,
    },
}

/// A fail-back message could not be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailBackError {
    /// The first byte is no message kind.
    Kind(u8),
    /// A QP number above 24 bits.
    Field {
        /// Which field.
        what: &'static str,
        /// Its value.
        value: u32,
    },
    /// The message names a data QP the virtual QP does not have.
    NoSuchQp {
        /// The index named.
        lane: u8,
        /// The data QPs there are.
        data_qps: usize,
    },
    /// A message about the notify QP to a virtual QP without one.
    NoNotifyQp,
    /// The message does not follow from where fail-back of that QP stands (an
    /// Answer to no Offer, a Ready to no Answer).
    Unexpected {
        /// The message.
        message: FailBack,
        /// Where that QP's fail-back stood.
        state: &'static str,
    },
    /// The peer's card does not offer fail-back.
    PeerLacks,
}

impl fmt::Display for FailBackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Kind(k) => write!(f, "fail-back message of unknown kind {k}"),
            Self::Field { what, value } => {
                write!(
                    f,
                    "fail-back message with a {what} of {value:#x}, above 24 bits"
                )
            }
            Self::NoSuchQp { lane, data_qps } => write!(
                f,
                "fail-back message for data QP {lane} of a virtual QP with {data_qps}"
            ),
            Self::NoNotifyQp => {
                write!(
                    f,
                    "fail-back message for the notify QP of a virtual QP without one"
                )
            }
            Self::Unexpected { message, state } => {
                write!(f, "fail-back message {message:?} while that QP is {state}")
            }
            Self::PeerLacks => write!(f, "the peer's card does not offer fail-back"),
        }
    }
}

impl std::error::Error for FailBackError {}

impl FailBack {
    /// The QP the message is about: a data QP's index, or [`NOTIFY_QP`].
    pub fn lane(&self) -> u8 {
        match *self {
            Self::Offer { lane, .. }
            | Self::Answer { lane, .. }
            | Self::Ready { lane }
            | Self::Refuse { lane } => lane,
        }
    }

    /// The message on the wire.
    pub fn encode(&self) -> [u8; MESSAGE_LEN] {
        let (kind, lane, qpn, seen) = match *self {
            Self::Offer { lane, qpn, seen } => (1, lane, qpn, seen),
            Self::Answer { lane, qpn, seen } => (2, lane, qpn, seen),
            Self::Ready { lane } => (3, lane, 0, 0),
            Self::Refuse { lane } => (4, lane, 0, 0),
        };
        let q = (qpn & MAX_24BIT).to_be_bytes();
        let c = (seen & MAX_24BIT).to_be_bytes();
        [kind, lane, q[1], q[2], q[3], c[1], c[2], c[3]]
    }

    /// A message from the wire.
    ///
    /// # Errors
    /// [`FailBackError::Kind`] for an unknown first byte.
    pub fn decode(b: &[u8; MESSAGE_LEN]) -> Result<Self, FailBackError> {
        let lane = b[1];
        let qpn = u32::from_be_bytes([0, b[2], b[3], b[4]]);
        let seen = u32::from_be_bytes([0, b[5], b[6], b[7]]);
        Ok(match b[0] {
            1 => Self::Offer { lane, qpn, seen },
            2 => Self::Answer { lane, qpn, seen },
            3 => Self::Ready { lane },
            4 => Self::Refuse { lane },
            k => return Err(FailBackError::Kind(k)),
        })
    }

    /// Checks the QP number of a message made here (decoded ones fit); counts are
    /// sent modulo 2^24.
    pub(crate) fn check(&self) -> Result<(), FailBackError> {
        if let Self::Offer { qpn, .. } | Self::Answer { qpn, .. } = *self {
            if qpn > MAX_24BIT {
                return Err(FailBackError::Field {
                    what: "QP number",
                    value: qpn,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_unknown_kinds_are_refused() {
        for m in [
            FailBack::Offer {
                lane: 3,
                qpn: 0xab_cdef,
                seen: 0x12_3456,
            },
            FailBack::Answer {
                lane: NOTIFY_QP,
                qpn: 1,
                seen: MAX_24BIT,
            },
            FailBack::Ready { lane: 0 },
            FailBack::Refuse { lane: 7 },
            FailBack::Ready { lane: NOTIFY_QP },
        ] {
            assert_eq!(FailBack::decode(&m.encode()), Ok(m));
            assert_eq!(m.check(), Ok(()));
        }
        let offer = FailBack::Offer {
            lane: 1,
            qpn: 0x0102_0304,
            seen: 5,
        };
        assert_eq!(
            offer.check(),
            Err(FailBackError::Field {
                what: "QP number",
                value: 0x0102_0304
            })
        );
        assert_eq!(
            FailBack::decode(&[9, 0, 0, 0, 0, 0, 0, 0]),
            Err(FailBackError::Kind(9))
        );
        assert_eq!(FailBack::decode(&[0; 8]), Err(FailBackError::Kind(0)));
        assert_eq!(
            FailBack::Ready { lane: 2 }.encode(),
            [3, 2, 0, 0, 0, 0, 0, 0]
        );
        // Counts go modulo 2^24.
        assert_eq!(
            FailBack::Answer {
                lane: 0,
                qpn: 0x01_0203,
                seen: 0x0904_0506
            }
            .encode(),
            [2, 0, 1, 2, 3, 4, 5, 6]
        );
        assert!(first_psn(0xab_cdef) <= MAX_24BIT);
        assert_eq!(notify_port(notify_lane(3)), Some(3));
        assert_eq!(notify_port(NOTIFY_QP), Some(0));
        assert_eq!((notify_port(63), notify_port(251)), (None, None));
        assert_ne!(first_psn(1), first_psn(2));
    }
}
