//! Each field a card must not carry is refused with its own error, on encode and
//! on decode.

use super::super::*;
use super::{card, card_on};

/// `good` (one port address, two data QPs and a notify QP) with `f` applied.
fn patched(f: impl FnOnce(&mut [u8])) -> Result<Card, CardError> {
    let mut b = card(Mode::Spray, 2).to_bytes().unwrap();
    f(&mut b);
    Card::decode(&b)
}

/// Offset of QP entry `i` in a card with one port address.
const fn qp_at(i: usize) -> usize {
    HEADER_LEN + PORT_ENTRY_LEN + i * QP_ENTRY_LEN
}

#[test]
fn unknown_flag_bits_are_refused() {
    for bit in 1..8 {
        let e = patched(|b| b[10] |= 1 << bit).unwrap_err();
        assert_eq!(e, CardError::UnknownFlags(1 << bit), "bit {bit}");
    }
    let e = patched(|b| b[10] = 0xff).unwrap_err();
    assert_eq!(e, CardError::UnknownFlags(0xfe));
    assert_eq!(
        e.to_string(),
        "endpoint card sets unknown flag bits 0xfe (only bit 0, the notify QP, is defined)"
    );
}

#[test]
fn reserved_bytes_are_refused() {
    // Each of the three reserved bytes of each entry, the notify QP's (entry 2) too.
    for entry in 0..3 {
        for byte in 0..3 {
            let e = patched(|b| b[qp_at(entry) + 9 + byte] = 0xee).unwrap_err();
            let mut bytes = [0; 3];
            bytes[byte] = 0xee;
            assert_eq!(e, CardError::Reserved { entry, bytes }, "{entry}/{byte}");
        }
    }
    let e = patched(|b| b[qp_at(1) + 11] = 1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "endpoint card QP entry 1 has reserved bytes [00, 00, 01] set (they must be zero)"
    );
}

#[test]
fn the_mtu_must_be_an_infiniband_mtu() {
    for mtu in IB_MTUS {
        let mut c = card_on(Mode::Dqplb, 4, 2);
        c.ports[1].mtu = mtu;
        assert_eq!(Card::decode(&c.to_bytes().unwrap()), Ok(c));
    }
    for mtu in [0, 1, 1500, 4095, 9000, u16::MAX] {
        let mut c = card_on(Mode::Dqplb, 4, 2);
        c.ports[1].mtu = mtu;
        assert_eq!(c.to_bytes(), Err(CardError::Mtu { port: 1, mtu }), "{mtu}");
        let e = patched(|b| b[40..42].copy_from_slice(&mtu.to_be_bytes())).unwrap_err();
        assert_eq!(e, CardError::Mtu { port: 0, mtu }, "{mtu}");
    }
    assert_eq!(
        CardError::Mtu { port: 0, mtu: 9000 }.to_string(),
        "endpoint card port address 0 has MTU 9000, not an InfiniBand MTU \
         (256, 512, 1024, 2048 or 4096)"
    );
}

#[test]
fn qp_numbers_0_and_1_are_refused() {
    for qpn in [0, 1] {
        // A data QP ...
        let mut c = card(Mode::Spray, 2);
        c.data[1].qpn = qpn;
        assert_eq!(
            c.to_bytes(),
            Err(CardError::SpecialQpn { entry: 1, qpn }),
            "{qpn}"
        );
        let e = patched(|b| b[qp_at(0)..qp_at(0) + 4].copy_from_slice(&qpn.to_be_bytes()));
        assert_eq!(e, Err(CardError::SpecialQpn { entry: 0, qpn }));
        // ... and the notify QP.
        let e = patched(|b| b[qp_at(2)..qp_at(2) + 4].copy_from_slice(&qpn.to_be_bytes()));
        assert_eq!(e, Err(CardError::SpecialQpn { entry: 2, qpn }));
    }
    let mut c = card(Mode::Spray, 2);
    c.data[0].qpn = 2;
    assert_eq!(Card::decode(&c.to_bytes().unwrap()), Ok(c));
    assert!(CardError::SpecialQpn { entry: 0, qpn: 1 }
        .to_string()
        .contains("GSI"));
}

#[test]
fn a_qp_number_twice_at_one_port_address_is_refused() {
    // Two data QPs.
    let e = patched(|b| b[qp_at(1)..qp_at(1) + 4].copy_from_slice(&0x100u32.to_be_bytes()));
    let dup = CardError::DuplicateQpn {
        qpn: 0x100,
        port: 0,
        first: 0,
        second: 1,
    };
    assert_eq!(e, Err(dup));
    assert_eq!(
        dup.to_string(),
        "endpoint card names QP number 0x100 at port address 0 twice (QP entries 0 and 1)"
    );
    // A data QP and the notify QP.
    let mut c = card(Mode::Spray, 2);
    c.notify.as_mut().unwrap().qpn = c.data[1].qpn;
    assert_eq!(
        c.to_bytes(),
        Err(CardError::DuplicateQpn {
            qpn: 0x101,
            port: 0,
            first: 1,
            second: 2
        })
    );
    // The same number on two devices is two QPs: each device numbers its own.
    let mut c = card_on(Mode::Dqplb, 4, 2);
    c.data[1].qpn = c.data[0].qpn;
    assert_eq!((c.data[0].port, c.data[1].port), (0, 1));
    assert_eq!(Card::decode(&c.to_bytes().unwrap()), Ok(c.clone()));
    // But not on the same one.
    c.data[2].qpn = c.data[0].qpn;
    assert_eq!(
        c.to_bytes(),
        Err(CardError::DuplicateQpn {
            qpn: 0x100,
            port: 0,
            first: 0,
            second: 2
        })
    );
}

#[test]
fn the_window_must_be_a_power_of_two() {
    for w in [0, 3, 1000, 1025, u32::MAX] {
        let mut c = card(Mode::Dqplb, 4);
        c.window = w;
        assert_eq!(c.to_bytes(), Err(CardError::WindowNotPowerOfTwo(w)), "{w}");
        let e = patched(|b| b[32..36].copy_from_slice(&w.to_be_bytes()));
        assert_eq!(e, Err(CardError::WindowNotPowerOfTwo(w)), "{w}");
    }
    for w in [1, 2, 1024, 1 << 31] {
        let mut c = card(Mode::Dqplb, 4);
        c.window = w;
        assert_eq!(Card::decode(&c.to_bytes().unwrap()), Ok(c), "{w}");
    }
    assert_eq!(
        CardError::WindowNotPowerOfTwo(1000).to_string(),
        "endpoint card's reorder window 1000 is not a power of two"
    );
}
