//! Fail-back's messages: how two sides replace a failed data QP with a fresh pair,
//! over a channel that does not depend on the data QPs (the TCP connection the cards
//! went over, kept open; the application carries the 8-byte messages).
//!
//! Three messages, as the RDMA CM connects a QP (REQ, REP, RTU), so that neither side
//! sends to a QP the other cannot yet receive on:
//!
//! ```text
//!  A (starts)                                  B
//!  fresh QP → INIT, receives posted
//!  ── Offer { lane, qpn, psn } ─────────────►  fresh QP → INIT, receives posted,
//!                                              (its old QP i taken out if healthy),
//!                                              → RTR → RTS, not yet sending
//!  ◄──────────────── Answer { lane, qpn, psn } ─
//!  → RTR → RTS, sending                        
//!  ── Ready { lane } ───────────────────────►  sending
//! ```
//!
//! Either side may start, for any failed data QP, at any time. When both offer for
//! the same QP at once, the offer with the lower (QP number, PSN) wins: its sender
//! ignores the other's offer, the other answers with the QP it had offered. A side
//! that cannot replace its QP (re-dispatch off, its virtual QP failed) answers
//! `Refuse`, and the offering side's QP stays failed (it may offer again later).
//! Capability [`FAIL_BACK`](crate::Capabilities::FAIL_BACK) in the endpoint card
//! says a side speaks this.
//!
//! SPRAY's notify QP is replaced the same way, with two differences. Each side's
//! offer or answer also says how many of the peer's notifies its old notify QP
//! received (vqp-core's `notifies_seen`), so that the peer posts again exactly the
//! notifies that did not land: a side can only say so once its old QP's receives have
//! all flushed, and until then it refuses an offer (after taking its notify QP out if
//! it still ran) and the offering side offers again later. And the first PSN is not
//! sent but follows from the QP number ([`notify_psn`]), to leave room for the count.
//!
//! Wire format, 8 bytes: the kind (1 Offer, 2 Answer, 3 Ready, 4 Refuse), the data
//! QP index ([`NOTIFY_QP`] for the notify QP), the QP number (24 bits, big-endian),
//! the first PSN (24 bits); Ready and Refuse carry zeros in the last six bytes. The
//! notify QP's offer and answer (kinds 5 and 6) carry the QP number in bytes 1–3 and
//! the count of notifies received (32 bits, big-endian) in bytes 4–7.

use std::fmt;

/// The length of an encoded message.
pub const MESSAGE_LEN: usize = 8;

/// The lane that names the SPRAY notify QP in [`FailBack::Ready`] and
/// [`FailBack::Refuse`] (data QP indexes are below it).
pub const NOTIFY_QP: u8 = u8::MAX;

/// The first PSN of a replacement notify QP, which its offer or answer does not
/// carry: the QP number mixed into 24 bits.
pub fn notify_psn(qpn: u32) -> u32 {
    qpn.wrapping_mul(0x9e37_79b1) >> 8
}

const MAX_24BIT: u32 = (1 << 24) - 1;

/// One fail-back message (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailBack {
    /// The sender replaced its data QP `lane` with a QP in INIT, its receives
    /// posted: replace yours and answer.
    Offer {
        /// The data QP's index.
        lane: u8,
        /// The replacement's QP number.
        qpn: u32,
        /// The first PSN it sends.
        psn: u32,
    },
    /// The sender's replacement of data QP `lane` is at RTS and receiving: connect
    /// yours, send, and say Ready.
    Answer {
        /// The data QP's index.
        lane: u8,
        /// The replacement's QP number.
        qpn: u32,
        /// The first PSN it sends.
        psn: u32,
    },
    /// The sender's replacement of data QP `lane` is at RTS and receiving.
    Ready {
        /// The data QP's index.
        lane: u8,
    },
    /// The sender cannot replace its data QP `lane` (now).
    Refuse {
        /// The data QP's index.
        lane: u8,
    },
    /// As [`FailBack::Offer`], for the notify QP: its first PSN is
    /// [`notify_psn`]`(qpn)`.
    NotifyOffer {
        /// The replacement's QP number.
        qpn: u32,
        /// Notifies of the peer the sender's old notify QP received (mod 2^32).
        seen: u32,
    },
    /// As [`FailBack::Answer`], for the notify QP.
    NotifyAnswer {
        /// The replacement's QP number.
        qpn: u32,
        /// Notifies of the peer the sender's old notify QP received (mod 2^32).
        seen: u32,
    },
}

/// A fail-back message could not be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailBackError {
    /// The first byte is no message kind.
    Kind(u8),
    /// A QP number or PSN above 24 bits.
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
    /// The data QP the message is about, or [`NOTIFY_QP`].
    pub fn lane(&self) -> u8 {
        match *self {
            Self::Offer { lane, .. }
            | Self::Answer { lane, .. }
            | Self::Ready { lane }
            | Self::Refuse { lane } => lane,
            Self::NotifyOffer { .. } | Self::NotifyAnswer { .. } => NOTIFY_QP,
        }
    }

    /// The message on the wire.
    pub fn encode(&self) -> [u8; MESSAGE_LEN] {
        let (kind, lane, qpn, psn) = match *self {
            Self::Offer { lane, qpn, psn } => (1, lane, qpn, psn),
            Self::Answer { lane, qpn, psn } => (2, lane, qpn, psn),
            Self::Ready { lane } => (3, lane, 0, 0),
            Self::Refuse { lane } => (4, lane, 0, 0),
            Self::NotifyOffer { qpn, seen } | Self::NotifyAnswer { qpn, seen } => {
                let kind = if matches!(self, Self::NotifyOffer { .. }) {
                    5
                } else {
                    6
                };
                let q = (qpn & MAX_24BIT).to_be_bytes();
                let c = seen.to_be_bytes();
                return [kind, q[1], q[2], q[3], c[0], c[1], c[2], c[3]];
            }
        };
        let q = (qpn & MAX_24BIT).to_be_bytes();
        let p = (psn & MAX_24BIT).to_be_bytes();
        [kind, lane, q[1], q[2], q[3], p[1], p[2], p[3]]
    }

    /// A message from the wire.
    ///
    /// # Errors
    /// [`FailBackError::Kind`] for an unknown first byte.
    pub fn decode(b: &[u8; MESSAGE_LEN]) -> Result<Self, FailBackError> {
        let lane = b[1];
        let qpn = u32::from_be_bytes([0, b[2], b[3], b[4]]);
        let psn = u32::from_be_bytes([0, b[5], b[6], b[7]]);
        let notify_qpn = u32::from_be_bytes([0, b[1], b[2], b[3]]);
        let seen = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        Ok(match b[0] {
            1 => Self::Offer { lane, qpn, psn },
            2 => Self::Answer { lane, qpn, psn },
            3 => Self::Ready { lane },
            4 => Self::Refuse { lane },
            5 => Self::NotifyOffer {
                qpn: notify_qpn,
                seen,
            },
            6 => Self::NotifyAnswer {
                qpn: notify_qpn,
                seen,
            },
            k => return Err(FailBackError::Kind(k)),
        })
    }

    /// Checks the 24-bit fields of a message made here (decoded ones fit).
    pub(crate) fn check(&self) -> Result<(), FailBackError> {
        let fields = match *self {
            Self::Offer { qpn, psn, .. } | Self::Answer { qpn, psn, .. } => Some((qpn, psn)),
            Self::NotifyOffer { qpn, .. } | Self::NotifyAnswer { qpn, .. } => Some((qpn, 0)),
            Self::Ready { .. } | Self::Refuse { .. } => None,
        };
        if let Some((qpn, psn)) = fields {
            for (what, value) in [("QP number", qpn), ("PSN", psn)] {
                if value > MAX_24BIT {
                    return Err(FailBackError::Field { what, value });
                }
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
                psn: 0x12_3456,
            },
            FailBack::Answer {
                lane: 255,
                qpn: 1,
                psn: MAX_24BIT,
            },
            FailBack::Ready { lane: 0 },
            FailBack::Refuse { lane: 7 },
            FailBack::NotifyOffer {
                qpn: 0x12_3456,
                seen: 0xfedc_ba98,
            },
            FailBack::NotifyAnswer { qpn: 9, seen: 0 },
            FailBack::Ready { lane: NOTIFY_QP },
        ] {
            assert_eq!(FailBack::decode(&m.encode()), Ok(m));
            assert_eq!(m.check(), Ok(()));
        }
        let offer = FailBack::Offer {
            lane: 1,
            qpn: 0x0102_0304,
            psn: 5,
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
        assert_eq!(
            FailBack::NotifyOffer {
                qpn: 0x01_0203,
                seen: 0x0405_0607
            }
            .encode(),
            [5, 1, 2, 3, 4, 5, 6, 7]
        );
        assert_eq!(FailBack::NotifyAnswer { qpn: 1, seen: 2 }.lane(), NOTIFY_QP);
        assert!(notify_psn(0xab_cdef) <= MAX_24BIT);
    }
}
