//! [`Card::agree`]: whether two cards can be connected, checked in both directions.

use vqp_core::Mode;

use super::{Capabilities, Card, CardError};

/// The reorder window `receiver` needs for `sender`'s DQPLB traffic: the sender's own
/// window, and at least what it may have in flight (`data QPs × (receiver's
/// recv_depth + sender's max_outstanding)`).
fn window_needed(sender: &Card, receiver: &Card) -> u64 {
    let n = sender.data.len() as u64;
    let in_flight = n * (u64::from(receiver.recv_depth) + u64::from(sender.max_outstanding));
    in_flight.max(u64::from(sender.window))
}

impl Card {
    /// Checks that a virtual QP with this card can talk to one with `peer`'s.
    ///
    /// Refused, each with its own error: a different mode, `max_frag`,
    /// `max_outstanding` or `recv_depth`, number of data QPs, or notify QP presence;
    /// data QPs that would pair one device of either side with two of the other (a
    /// request carries one rkey per local device, and the receiving side's device
    /// gets one lkey; see [`CardError::DevicePairing`]);
    /// a capability this side requires that the peer lacks, then one the peer requires
    /// that this side lacks; and, in DQPLB with several data QPs, a peer window too
    /// small for this side's sender, then a window of this side too small for the
    /// peer's sender. A sender numbers fragments up to its own window less the
    /// receives the receiver may hold unprocessed ahead of the oldest outstanding one
    /// (vqp-core's rule, `BuildError::Window`), so each side's window must be at least
    /// the other's and at least `data QPs × (recv_depth + max_outstanding)`.
    ///
    /// Every check runs in both directions, so `a.agree(&b)` fails exactly when
    /// `b.agree(&a)` does: each end of a refused pairing sees the refusal and its
    /// reason itself, instead of one end refusing and the other seeing a disconnect.
    ///
    /// # Errors
    /// The first mismatch found, in the order above.
    pub fn agree(&self, peer: &Card) -> Result<(), CardError> {
        if self.mode != peer.mode {
            return Err(CardError::Mode {
                mine: self.mode,
                peer: peer.mode,
            });
        }
        if self.max_frag != peer.max_frag {
            return Err(CardError::MaxFrag {
                mine: self.max_frag,
                peer: peer.max_frag,
            });
        }
        for (what, mine, theirs) in [
            (
                "max_outstanding",
                self.max_outstanding,
                peer.max_outstanding,
            ),
            ("recv_depth", self.recv_depth, peer.recv_depth),
        ] {
            if mine != theirs {
                return Err(CardError::Depth {
                    what,
                    mine,
                    peer: theirs,
                });
            }
        }
        if self.data.len() != peer.data.len() {
            return Err(CardError::DataQps {
                mine: self.data.len(),
                peer: peer.data.len(),
            });
        }
        if self.notify.is_some() != peer.notify.is_some() {
            return Err(CardError::Notify {
                mine: self.notify.is_some(),
                peer: peer.notify.is_some(),
            });
        }
        // Port indices are below MAX_PORTS (4) in a valid card; larger ones are
        // compared as they are, and `validate` reports them.
        let mut to_peer = [None::<u8>; 256];
        let mut to_mine = [None::<u8>; 256];
        for (qp, (m, p)) in self.data.iter().zip(&peer.data).enumerate() {
            let (mp, pp) = (m.port, p.port);
            let fwd = *to_peer[usize::from(mp)].get_or_insert(pp);
            let back = *to_mine[usize::from(pp)].get_or_insert(mp);
            if fwd != pp || back != mp {
                return Err(CardError::DevicePairing {
                    qp,
                    mine: mp,
                    peer: pp,
                });
            }
        }
        let missing = self.required.without(peer.caps);
        if missing != Capabilities::NONE {
            return Err(CardError::MissingCapabilities(missing));
        }
        let lacking = peer.required.without(self.caps);
        if lacking != Capabilities::NONE {
            return Err(CardError::PeerRequires(lacking));
        }
        if self.mode == Mode::Dqplb && self.data.len() > 1 {
            let needed = window_needed(self, peer);
            if u64::from(peer.window) < needed {
                return Err(CardError::Window {
                    peer: peer.window,
                    needed,
                });
            }
            let needed = window_needed(peer, self);
            if u64::from(self.window) < needed {
                return Err(CardError::OwnWindow {
                    mine: self.window,
                    needed,
                });
            }
        }
        Ok(())
    }
}
