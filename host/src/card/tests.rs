//! Round trips, every decode error and every mismatch.

use super::*;

fn gid(last: u8) -> Gid {
    Gid::from_bytes([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, last])
}

/// A card with `n` data QPs on one port.
fn card(mode: Mode, n: u32) -> Card {
    card_on(mode, n, 1)
}

/// A card with `n` data QPs, data QP `i` on port `i % ports`, the notify QP on port 0.
fn card_on(mode: Mode, n: u32, ports: u8) -> Card {
    Card {
        mode,
        caps: Capabilities::supported(),
        required: Capabilities::required_for(mode),
        max_frag: 64 << 10,
        max_outstanding: 16,
        recv_depth: 8,
        window: 1024,
        init_seq: 0xab_cdef,
        ports: (0..ports)
            .map(|p| PortAddr {
                mtu: 4096 >> p,
                lid: 0x12 + u16::from(p),
                gid: gid(8 + p),
            })
            .collect(),
        data: (0..n)
            .map(|i| QpAddr {
                qpn: 0x100 + i,
                psn: 0x10_0000 + i,
                port: (i % u32::from(ports)) as u8,
            })
            .collect(),
        notify: (mode == Mode::Spray && n > 1).then_some(QpAddr {
            qpn: 0x200,
            psn: 0xff_ffff,
            port: 0,
        }),
    }
}

#[test]
fn round_trips() {
    for (mode, n, ports) in [
        (Mode::Dqplb, 1, 1),
        (Mode::Dqplb, 4, 1),
        (Mode::Dqplb, 4, 2),
        (Mode::Spray, 3, 1),
        (Mode::Spray, 5, 3),
        (Mode::Spray, 64, 4),
    ] {
        let c = card_on(mode, n, ports);
        let bytes = c.to_bytes().unwrap();
        assert_eq!(bytes.len(), c.encoded_len());
        assert_eq!(Card::decode(&bytes).unwrap(), c);
        // Trailing bytes past the declared length are ignored.
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0xee; 7]);
        assert_eq!(Card::decode(&longer).unwrap(), c);
    }
}

#[test]
fn layout_is_the_documented_one() {
    let c = card_on(Mode::Spray, 2, 2);
    let b = c.to_bytes().unwrap();
    assert_eq!(&b[0..4], b"VQPC");
    assert_eq!(&b[4..6], &[0, 2], "version 2, big-endian");
    assert_eq!(
        usize::from(u16::from_be_bytes([b[6], b[7]])),
        40 + 2 * 20 + 3 * 12
    );
    assert_eq!(b.len(), 116);
    assert_eq!((b[8], b[9], b[10], b[11]), (0, 2, 1, 2));
    assert_eq!(&b[12..16], &Capabilities::supported().0.to_be_bytes());
    assert_eq!(&b[20..24], &(64u32 << 10).to_be_bytes());
    assert_eq!(&b[24..28], &16u32.to_be_bytes());
    assert_eq!(&b[28..32], &8u32.to_be_bytes());
    assert_eq!(&b[32..36], &1024u32.to_be_bytes());
    assert_eq!(&b[36..40], &0xab_cdefu32.to_be_bytes());
    // Port addresses: MTU, LID, GID.
    assert_eq!(&b[40..42], &4096u16.to_be_bytes());
    assert_eq!(&b[42..44], &0x12u16.to_be_bytes());
    assert_eq!(&b[44..60], gid(8).as_bytes());
    assert_eq!(&b[60..62], &2048u16.to_be_bytes());
    assert_eq!(&b[62..64], &0x13u16.to_be_bytes());
    assert_eq!(&b[64..80], gid(9).as_bytes());
    // QPs: QPN, PSN, port index, reserved.
    assert_eq!(&b[80..92], &[0, 0, 1, 0, 0, 0x10, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&b[92..104], &[0, 0, 1, 1, 0, 0x10, 0, 1, 1, 0, 0, 0]);
    assert_eq!(
        &b[104..116],
        &[0, 0, 2, 0, 0, 0xff, 0xff, 0xff, 0, 0, 0, 0],
        "notify last"
    );
    assert_eq!(MAX_LEN, 900);
    assert_eq!(c.port_of(&c.data[1]), Some(&c.ports[1]));
    assert_eq!(
        c.port_of(&QpAddr {
            port: 2,
            ..c.data[1]
        }),
        None
    );
}

#[test]
fn encode_checks_the_buffer_and_the_fields() {
    let c = card(Mode::Dqplb, 2);
    let mut small = [0u8; 70];
    assert_eq!(
        c.encode(&mut small),
        Err(CardError::BufferTooSmall {
            needed: 84,
            got: 70
        })
    );
    let mut big = [0u8; MAX_LEN];
    assert_eq!(c.encode(&mut big), Ok(84));

    let mut none = c.clone();
    none.data.clear();
    assert_eq!(none.to_bytes(), Err(CardError::NoDataQps));
    let many = card(Mode::Dqplb, 65);
    assert_eq!(many.to_bytes(), Err(CardError::TooManyQps(65)));
    let mut wide = c.clone();
    wide.data[1].psn = 1 << 24;
    assert_eq!(
        wide.to_bytes(),
        Err(CardError::OutOfRange {
            field: "psn",
            value: 1 << 24
        })
    );
    let mut portless = c.clone();
    portless.ports.clear();
    assert_eq!(portless.to_bytes(), Err(CardError::Ports(0)));
    let mut five = card_on(Mode::Dqplb, 8, 4);
    five.ports.push(PortAddr::default());
    assert_eq!(five.to_bytes(), Err(CardError::Ports(5)));
    let mut lost = c.clone();
    lost.data[0].port = 1;
    let e = lost.to_bytes().unwrap_err();
    assert_eq!(e, CardError::UnknownPort { port: 1, ports: 1 });
    assert_eq!(
        e.to_string(),
        "endpoint card names port address 1 but lists only 1"
    );
    let mut seq = c;
    seq.init_seq = u32::MAX;
    assert!(matches!(
        seq.to_bytes(),
        Err(CardError::OutOfRange {
            field: "init_seq",
            ..
        })
    ));
}

#[test]
fn every_decode_error() {
    let good = card(Mode::Spray, 2).to_bytes().unwrap();

    for cut in [0, 3, 5, 20, 39] {
        assert!(
            matches!(
                Card::decode(&good[..cut]),
                Err(CardError::Truncated { needed: 40, got }) if got == cut
            ),
            "cut at {cut}"
        );
    }
    assert_eq!(
        Card::decode(&good[..good.len() - 1]),
        Err(CardError::Truncated {
            needed: good.len(),
            got: good.len() - 1
        })
    );

    let mut b = good.clone();
    b[0] = b'X';
    assert_eq!(Card::decode(&b), Err(CardError::BadMagic(*b"XQPC")));

    let mut b = good.clone();
    b[5] = 1;
    let e = Card::decode(&b).unwrap_err();
    assert_eq!(e, CardError::UnsupportedVersion(1));
    assert_eq!(
        e.to_string(),
        "endpoint card format version 1 is not supported (this build reads version 2)"
    );
    b[5] = 3;
    assert_eq!(Card::decode(&b), Err(CardError::UnsupportedVersion(3)));

    let mut b = good.clone();
    b[8] = 7;
    assert_eq!(Card::decode(&b), Err(CardError::UnknownMode(7)));

    let mut b = good.clone();
    b[9] = 65;
    assert_eq!(Card::decode(&b), Err(CardError::TooManyQps(65)));
    b[9] = 255;
    assert_eq!(Card::decode(&b), Err(CardError::TooManyQps(255)));

    let mut b = good.clone();
    b[9] = 0;
    assert_eq!(Card::decode(&b), Err(CardError::NoDataQps));

    let mut b = good.clone();
    b[10] = 0; // drops the notify flag: the length no longer matches
    assert_eq!(
        Card::decode(&b),
        Err(CardError::BadLength {
            declared: 96,
            expected: 84
        })
    );

    let mut b = good.clone();
    b[11] = 0;
    assert_eq!(Card::decode(&b), Err(CardError::Ports(0)));
    b[11] = 5;
    assert_eq!(Card::decode(&b), Err(CardError::Ports(5)));
    b[11] = 2; // one more port address than the bytes hold
    assert_eq!(
        Card::decode(&b),
        Err(CardError::BadLength {
            declared: 96,
            expected: 116
        })
    );

    let mut b = good.clone();
    b[60] = 1; // QPN with bit 24 set
    assert_eq!(
        Card::decode(&b),
        Err(CardError::OutOfRange {
            field: "qpn",
            value: 0x0100_0100
        })
    );

    let mut b = good.clone();
    b[60 + 8] = 1; // the first QP's port address is not listed
    assert_eq!(
        Card::decode(&b),
        Err(CardError::UnknownPort { port: 1, ports: 1 })
    );
    // Reserved bytes are ignored (a later version may use them).
    let mut b = good.clone();
    b[60 + 9] = 0xee;
    assert_eq!(Card::decode(&b), Ok(card(Mode::Spray, 2)));

    // Arbitrary bytes never panic.
    let mut x = 0x9e37_79b9u32;
    for len in 0..200 {
        let mut junk: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let _ = Card::decode(&junk);
        if len >= 8 {
            junk[..8].copy_from_slice(&good[..8]);
            let _ = Card::decode(&junk);
        }
    }
}

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
    spray.required = Capabilities::DUPLICATE_TOLERANT;
    assert_eq!(
        spray.agree(&peer),
        Err(CardError::MissingCapabilities(
            Capabilities::DUPLICATE_TOLERANT
        ))
    );
}

#[test]
fn capabilities_print_by_name() {
    assert_eq!(Capabilities::NONE.to_string(), "NONE");
    assert_eq!(
        Capabilities::supported().to_string(),
        "SPRAY | DQPLB | PIPELINED_NOTIFY"
    );
    assert_eq!(Capabilities(1 << 31 | 2).to_string(), "DQPLB | 0x80000000");
}
