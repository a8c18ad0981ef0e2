//! Two cards agree, or each mismatch is refused with its own error, from both ends.

use super::super::*;
use super::{card, card_on};

/// A capability no build defines yet: one a later build's peer may require.
const LATER: Capabilities = Capabilities(1 << 8);

#[test]
fn matching_cards_agree() {
    for (mode, n) in [(Mode::Dqplb, 4), (Mode::Spray, 4), (Mode::Dqplb, 1)] {
        let (a, b) = (card(mode, n), card(mode, n));
        assert_eq!(a.agree(&b), Ok(()));
        assert_eq!(b.agree(&a), Ok(()));
    }
    // Two devices on each side: device d pairs with the peer's device d.
    let (a, b) = (card_on(Mode::Spray, 8, 2), card_on(Mode::Spray, 8, 2));
    assert_eq!(a.agree(&b), Ok(()));
    // Any one-to-one pairing will do.
    let mut swapped = b.clone();
    for q in &mut swapped.data {
        q.port ^= 1;
    }
    assert_eq!(a.agree(&swapped), Ok(()));
    // Two devices facing one: each of this side's devices meets the peer's only one,
    // but the peer's device would need two rkeys. Refused from both ends.
    let one = card_on(Mode::Dqplb, 4, 1);
    let two = card_on(Mode::Dqplb, 4, 2);
    let e = two.agree(&one).unwrap_err();
    assert_eq!(
        e,
        CardError::DevicePairing {
            qp: 1,
            mine: 1,
            peer: 0
        }
    );
    assert!(e.to_string().contains("same number of devices"), "{e}");
    assert_eq!(
        one.agree(&two),
        Err(CardError::DevicePairing {
            qp: 1,
            mine: 0,
            peer: 1
        })
    );
}

#[test]
fn every_mismatch_is_refused_with_its_own_error() {
    let mine = card(Mode::Dqplb, 4);

    let peer = card(Mode::Spray, 4);
    let e = mine.agree(&peer).unwrap_err();
    assert_eq!(
        e,
        CardError::Mode {
            mine: Mode::Dqplb,
            peer: Mode::Spray
        }
    );
    assert!(e.to_string().contains("mode mismatch"), "{e}");

    let mut peer = mine.clone();
    peer.max_frag = 4096;
    assert_eq!(
        mine.agree(&peer),
        Err(CardError::MaxFrag {
            mine: 65536,
            peer: 4096
        })
    );

    let mut peer = mine.clone();
    peer.max_outstanding = 32;
    assert_eq!(
        mine.agree(&peer),
        Err(CardError::Depth {
            what: "max_outstanding",
            mine: 16,
            peer: 32
        })
    );

    let mut peer = mine.clone();
    peer.recv_depth = 4;
    let e = mine.agree(&peer).unwrap_err();
    assert_eq!(
        e,
        CardError::Depth {
            what: "recv_depth",
            mine: 8,
            peer: 4
        }
    );
    assert_eq!(
        e.to_string(),
        "recv_depth mismatch: this side has 8, the peer 4"
    );

    let peer = card(Mode::Dqplb, 2);
    assert_eq!(
        mine.agree(&peer),
        Err(CardError::DataQps { mine: 4, peer: 2 })
    );

    let mut peer = mine.clone();
    peer.notify = Some(QpAddr {
        qpn: 5,
        psn: 5,
        port: 0,
    });
    assert_eq!(
        mine.agree(&peer),
        Err(CardError::Notify {
            mine: false,
            peer: true
        })
    );

    let mut peer = mine.clone();
    peer.caps = Capabilities::SPRAY;
    let e = mine.agree(&peer).unwrap_err();
    assert_eq!(e, CardError::MissingCapabilities(Capabilities::DQPLB));
    assert!(e.to_string().contains("DQPLB"), "{e}");

    // Smaller than this side's own window: this sender would outrun it.
    let mut peer = mine.clone();
    peer.window = 512;
    assert_eq!(
        mine.agree(&peer),
        Err(CardError::Window {
            peer: 512,
            needed: 1024
        })
    );
    // Smaller than data QPs × (recv_depth + max_outstanding), even if this side's
    // window is small too.
    let mut small = mine.clone();
    small.window = 16;
    let mut peer = mine.clone();
    peer.window = 64;
    assert_eq!(
        small.agree(&peer),
        Err(CardError::Window {
            peer: 64,
            needed: 4 * (8 + 16)
        })
    );
    // SPRAY and a single QP carry no sequence numbers: the window does not matter.
    let mut spray = card(Mode::Spray, 4);
    let mut peer = spray.clone();
    peer.window = 1;
    assert_eq!(spray.agree(&peer), Ok(()));
    spray.required = LATER;
    assert_eq!(
        spray.agree(&peer),
        Err(CardError::MissingCapabilities(LATER))
    );
}

#[test]
fn agree_checks_both_directions() {
    // The peer requires a capability this side lacks: refused here too, not only at
    // the peer.
    let mine = card(Mode::Dqplb, 4);
    let mut peer = mine.clone();
    peer.required = Capabilities(Capabilities::DQPLB.0 | LATER.0);
    let e = mine.agree(&peer).unwrap_err();
    assert_eq!(e, CardError::PeerRequires(LATER));
    assert_eq!(
        e.to_string(),
        "the peer requires capabilities 0x100 that this side lacks"
    );
    assert_eq!(
        peer.agree(&mine),
        Err(CardError::MissingCapabilities(LATER))
    );

    // This side's window is too small for the peer's sender.
    let mut peer = mine.clone();
    peer.window = 2048;
    let e = mine.agree(&peer).unwrap_err();
    assert_eq!(
        e,
        CardError::OwnWindow {
            mine: 1024,
            needed: 2048
        }
    );
    assert_eq!(
        e.to_string(),
        "this side's reorder window of 1024 is below the 2048 the peer may have in flight"
    );
    assert_eq!(
        peer.agree(&mine),
        Err(CardError::Window {
            peer: 1024,
            needed: 2048
        })
    );

    // Whatever differs, both ends reach the same verdict.
    let variants: [fn(&mut Card); 11] = [
        |_| {},
        |c| c.mode = Mode::Spray,
        |c| c.max_frag = 4096,
        |c| c.max_outstanding = 8,
        |c| c.recv_depth = 16,
        |c| {
            c.data.pop();
        },
        |c| c.window = 64,
        |c| c.window = 4096,
        |c| c.caps = Capabilities::SPRAY,
        |c| c.required = LATER,
        |c| c.data[0].port = 1,
    ];
    for (i, f) in variants.iter().enumerate() {
        for (j, g) in variants.iter().enumerate() {
            let (mut a, mut b) = (card_on(Mode::Dqplb, 4, 2), card_on(Mode::Dqplb, 4, 2));
            f(&mut a);
            g(&mut b);
            assert_eq!(
                a.agree(&b).is_ok(),
                b.agree(&a).is_ok(),
                "variants {i} and {j}: {:?} / {:?}",
                a.agree(&b),
                b.agree(&a)
            );
        }
    }
}
