//! Round trips and every decode error; the strict field checks in [`fields`], the
//! agreement of two cards in [`agree`].

mod agree;
mod fields;

use super::*;

pub(crate) fn gid(last: u8) -> Gid {
    Gid::from_bytes([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, last])
}

/// A card with `n` data QPs on one port.
pub(super) fn card(mode: Mode, n: u32) -> Card {
    card_on(mode, n, 1)
}

/// A card with `n` data QPs, data QP `i` on port `i % ports`, the notify QP on port 0.
pub(crate) fn card_on(mode: Mode, n: u32, ports: u8) -> Card {
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
fn capabilities_print_by_name() {
    assert_eq!(Capabilities::NONE.to_string(), "NONE");
    assert_eq!(
        Capabilities::supported().to_string(),
        "SPRAY | DQPLB | PIPELINED_NOTIFY | DUPLICATE_TOLERANT | FAIL_BACK"
    );
    assert_eq!(Capabilities(1 << 31 | 2).to_string(), "DQPLB | 0x80000000");
}
