//! Exchanging endpoint cards over TCP on 127.0.0.1: the protocol, its verdicts, its
//! deadlines and its errors. `DeadlineStream` on its own: `deadline.rs`.

mod peer;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use vqp_core::Mode;
use vqp_host::exchange::{self, barrier, barrier_timeout, exchange_timeout, serve_on, MAX_FRAME};
use vqp_host::{Capabilities, Card, CardError, Error, Gid, PortAddr, QpAddr};

use peer::{listener, raw_peer, trickle, SHORT};

fn card(first_qpn: u32, n: u32) -> Card {
    Card {
        mode: Mode::Dqplb,
        caps: Capabilities::supported(),
        required: Capabilities::required_for(Mode::Dqplb),
        max_frag: 65536,
        max_outstanding: 16,
        recv_depth: 16,
        window: 1024,
        init_seq: first_qpn,
        ports: vec![PortAddr {
            mtu: 1024,
            lid: 3,
            gid: Gid::default(),
        }],
        data: (0..n)
            .map(|i| QpAddr {
                qpn: first_qpn + i,
                psn: 7 * i,
                port: 0,
            })
            .collect(),
        notify: None,
    }
}

/// `bytes` as a frame: its length, then the bytes.
fn frame(bytes: &[u8]) -> Vec<u8> {
    let mut f = (bytes.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(bytes);
    f
}

#[test]
fn two_threads_exchange_cards_and_meet_at_the_barrier() {
    let l = listener();
    let addr = l.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (peer, mut stream) = serve_on(&l, &card(0x100, 4)).unwrap();
        barrier(&mut stream).unwrap();
        peer
    });
    let (peer, mut stream) = exchange::connect(addr, &card(0x200, 4)).unwrap();
    barrier(&mut stream).unwrap();
    assert_eq!(peer, card(0x100, 4));
    assert_eq!(server.join().unwrap(), card(0x200, 4));
    // The stream keeps per-operation timeouts for what the caller sends next.
    assert_eq!(
        stream.read_timeout().unwrap(),
        Some(exchange::DEFAULT_TIMEOUT)
    );
}

#[test]
fn serve_binds_its_own_listener() {
    // Find a free port, release it, and let `serve` bind it; `connect` retries until
    // the server listens.
    let port = listener().local_addr().unwrap().port();
    let server = thread::spawn(move || exchange::serve(("127.0.0.1", port), &card(0x10, 1)));
    let (peer, _s) = exchange::connect(("127.0.0.1", port), &card(0x20, 1)).unwrap();
    assert_eq!(peer.data[0].qpn, 0x10);
    assert_eq!(server.join().unwrap().unwrap().0.data[0].qpn, 0x20);
}

#[test]
fn a_mismatch_is_refused_by_both_sides_with_its_reason() {
    // The server requires fail-back, which the client (a build without it) does not
    // offer: the server refuses the client's card, and the client refuses the pairing
    // too, naming the same capability, instead of seeing a disconnect.
    let l = listener();
    let addr = l.local_addr().unwrap();
    let start = Instant::now();
    let server = thread::spawn(move || {
        let mut strict = card(0x100, 4);
        strict.required = Capabilities(strict.required.0 | Capabilities::FAIL_BACK.0);
        serve_on(&l, &strict).map(|(peer, _)| peer)
    });
    let mut older = card(0x200, 4);
    older.caps = older.caps.without(Capabilities::FAIL_BACK);
    let client = exchange::connect(addr, &older);
    let server = server.join().unwrap();
    let missing = Capabilities::FAIL_BACK;
    match server {
        Err(Error::Card(CardError::MissingCapabilities(c))) => assert_eq!(c, missing),
        other => panic!("server: {other:?}"),
    }
    match client {
        Err(ref e @ Error::Card(CardError::PeerRequires(c))) => {
            assert_eq!(c, missing);
            assert_eq!(
                e.to_string(),
                "endpoint card: the peer requires capabilities FAIL_BACK that this side lacks"
            );
        }
        other => panic!("client: {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(5), "nobody waited");
}

/// Reads the frame the side under test sends, so that closing afterwards is a clean
/// FIN (closing with unread data would be a reset).
fn read_frame(s: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut card = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut card).unwrap();
    card
}

/// Reads a verdict by hand: `None` for accept, the reason for a refusal.
fn read_verdict(s: &mut TcpStream) -> Option<String> {
    let mut tag = [0u8; 1];
    s.read_exact(&mut tag).unwrap();
    match tag[0] {
        b'A' => None,
        b'N' => {
            let mut len = [0u8; 2];
            s.read_exact(&mut len).unwrap();
            let mut text = vec![0u8; usize::from(u16::from_be_bytes(len))];
            s.read_exact(&mut text).unwrap();
            Some(String::from_utf8(text).unwrap())
        }
        other => panic!("verdict byte {other:#x}"),
    }
}

fn refusal(reason: &[u8]) -> Vec<u8> {
    let mut v = vec![b'N'];
    v.extend_from_slice(&(reason.len() as u16).to_be_bytes());
    v.extend_from_slice(reason);
    v
}

#[test]
fn a_card_only_this_side_refuses_is_refused_visibly_on_both_sides() {
    // A peer of a later format (version 3) that would accept our card: we refuse its
    // card, and it receives our reason.
    let (mut s, h) = raw_peer(|mut s| {
        let ours = Card::decode(&read_frame(&mut s)).unwrap();
        let mut newer = card(9, 2).to_bytes().unwrap();
        newer[5] = 3;
        s.write_all(&frame(&newer)).unwrap();
        s.write_all(b"A").unwrap();
        (ours, read_verdict(&mut s))
    });
    let e = exchange_timeout(&mut s, &card(0x11, 2), SHORT).unwrap_err();
    assert!(
        matches!(e, Error::Card(CardError::UnsupportedVersion(3))),
        "{e:?}"
    );
    let (ours, reason) = h.join().unwrap();
    assert_eq!(ours, card(0x11, 2));
    assert_eq!(
        reason.as_deref(),
        Some("endpoint card format version 3 is not supported (this build reads version 2)")
    );

    // The same with a reserved byte set in a QP entry.
    let (mut s, h) = raw_peer(|mut s| {
        read_frame(&mut s);
        let mut odd = card(9, 2).to_bytes().unwrap();
        let last = odd.len() - 1;
        odd[last] = 0x5a;
        s.write_all(&frame(&odd)).unwrap();
        s.write_all(b"A").unwrap();
        read_verdict(&mut s)
    });
    let e = exchange_timeout(&mut s, &card(0x11, 2), SHORT).unwrap_err();
    let Error::Card(c) = e else { panic!("{e:?}") };
    assert_eq!(
        c,
        CardError::Reserved {
            entry: 1,
            bytes: [0, 0, 0x5a]
        }
    );
    assert_eq!(h.join().unwrap(), Some(c.to_string()));
}

#[test]
fn the_peer_refusing_our_card_is_an_error_with_its_reason() {
    let (mut s, h) = raw_peer(|mut s| {
        read_frame(&mut s);
        s.write_all(&frame(&card(9, 2).to_bytes().unwrap()))
            .unwrap();
        s.write_all(&refusal(
            b"endpoint card format version 2 is not supported\x1b[31m",
        ))
        .unwrap();
        read_verdict(&mut s)
    });
    let e = exchange_timeout(&mut s, &card(0x11, 2), SHORT).unwrap_err();
    match &e {
        Error::PeerRefused { reason } => assert_eq!(
            reason, "endpoint card format version 2 is not supported\\u{1b}[31m",
            "control characters escaped"
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("the peer refused this side's endpoint card, saying: \"endpoint card"),
        "{e}"
    );
    // We accepted its card and said so.
    assert_eq!(h.join().unwrap(), None);

    // A refusal longer than the limit is not read into memory.
    let (mut s, h) = raw_peer(|mut s| {
        read_frame(&mut s);
        s.write_all(&frame(&card(9, 2).to_bytes().unwrap()))
            .unwrap();
        s.write_all(&[b'N', 0xff, 0xff]).unwrap();
        read_verdict(&mut s)
    });
    match exchange_timeout(&mut s, &card(0x11, 2), SHORT) {
        Err(Error::PeerTooLong {
            len: Some(65535),
            limit: 512,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    h.join().unwrap();

    // A verdict that is neither.
    let (mut s, h) = raw_peer(|mut s| {
        read_frame(&mut s);
        s.write_all(&frame(&card(9, 2).to_bytes().unwrap()))
            .unwrap();
        s.write_all(b"R").unwrap();
        read_verdict(&mut s)
    });
    let e = exchange_timeout(&mut s, &card(0x11, 2), SHORT).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the peer's verdict is malformed: expected 'A' or 'N', got byte 0x52"
    );
    h.join().unwrap();
}

#[test]
fn a_peer_that_disconnects_mid_card_says_how_far_it_got() {
    // Half a length prefix, then gone.
    let (mut s, h) = raw_peer(|mut s| {
        read_frame(&mut s);
        s.write_all(&[0, 0]).unwrap();
    });
    let e = exchange_timeout(&mut s, &card(0x11, 2), SHORT).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PeerClosed {
                what: "card",
                got: 2,
                expected: None
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "the peer closed the connection after 2 bytes of its card"
    );
    h.join().unwrap();

    // A length, then 30 bytes of the card.
    let bytes = card(9, 2).to_bytes().unwrap();
    let whole = 4 + bytes.len();
    let (mut s, h) = raw_peer(move |mut s| {
        read_frame(&mut s);
        s.write_all(&frame(&bytes)[..34]).unwrap();
    });
    let e = exchange_timeout(&mut s, &card(0x11, 2), SHORT).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("the peer closed the connection after 34 of {whole} bytes of its card")
    );
    h.join().unwrap();

    // Nothing at all.
    let (mut s, h) = raw_peer(|mut s| {
        read_frame(&mut s);
    });
    let e = exchange_timeout(&mut s, &card(0x11, 2), SHORT).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the peer closed the connection before sending its card"
    );
    h.join().unwrap();
}

#[test]
fn a_silent_peer_times_out_with_a_message_saying_so() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (mut s, h) = raw_peer(move |s| {
        let _ = rx.recv(); // hold the connection open, say nothing
        drop(s);
    });
    let start = Instant::now();
    let e = exchange_timeout(&mut s, &card(0x11, 1), SHORT).unwrap_err();
    assert!(start.elapsed() >= SHORT);
    match &e {
        Error::PeerTimeout {
            what: "card",
            timeout,
            got: 0,
            expected: None,
        } => assert_eq!(*timeout, SHORT),
        other => panic!("{other:?}"),
    }
    assert_eq!(e.to_string(), "no card from the peer within 300 ms");
    tx.send(()).unwrap();
    h.join().unwrap();
}

#[test]
fn a_trickling_peer_is_cut_off_at_the_whole_card_deadline() {
    // One byte every 40 ms: each read is well inside the 300 ms timeout, the card
    // frame (88 bytes, 3.4 s) is not.
    let bytes = frame(&card(9, 2).to_bytes().unwrap());
    let whole = bytes.len();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let (mut s, h) = raw_peer(move |mut s| {
        read_frame(&mut s);
        // The length at once, then the card byte by byte.
        s.write_all(&bytes[..4]).unwrap();
        4 + trickle(&mut s, &bytes[4..], Duration::from_millis(40), &done_rx)
    });
    let start = Instant::now();
    let e = exchange_timeout(&mut s, &card(0x11, 2), SHORT).unwrap_err();
    let took = start.elapsed();
    done_tx.send(()).unwrap();
    assert!(took >= SHORT, "{took:?}");
    assert!(took < Duration::from_millis(1500), "cut off late: {took:?}");
    match &e {
        Error::PeerTimeout {
            what: "card",
            got,
            expected,
            ..
        } => {
            assert!(*got >= 4 && *got < whole, "{e}");
            assert_eq!(*expected, Some(whole));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("no whole card from the peer within 300 ms: "),
        "{e}"
    );
    assert!(h.join().unwrap() < whole);
}

#[test]
fn the_barrier_has_a_whole_message_deadline() {
    // Silent peer.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (mut s, h) = raw_peer(move |mut s| {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        let _ = rx.recv();
    });
    let e = barrier_timeout(&mut s, SHORT).unwrap_err();
    assert_eq!(e.to_string(), "no ready byte from the peer within 300 ms");
    tx.send(()).unwrap();
    h.join().unwrap();

    // Wrong byte.
    let (mut s, h) = raw_peer(|mut s| {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        s.write_all(b"A").unwrap();
    });
    let e = barrier_timeout(&mut s, SHORT).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PeerMalformed {
                what: "ready byte",
                ..
            }
        ),
        "{e:?}"
    );
    h.join().unwrap();

    // `barrier` takes the stream's read timeout as the whole deadline, and leaves it.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (mut s, h) = raw_peer(move |mut s| {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        let _ = rx.recv();
    });
    s.set_read_timeout(Some(SHORT)).unwrap();
    let start = Instant::now();
    let e = barrier(&mut s).unwrap_err();
    assert!(start.elapsed() < Duration::from_millis(1500));
    assert!(matches!(e, Error::PeerTimeout { .. }), "{e:?}");
    assert_eq!(s.read_timeout().unwrap(), Some(SHORT));
    tx.send(()).unwrap();
    h.join().unwrap();
}

#[test]
fn malformed_frames_are_refused() {
    // Not a card: refused, and the peer is told why.
    let (mut s, h) = raw_peer(|mut s| {
        read_frame(&mut s);
        s.write_all(&frame(b"HTTP/1.1")).unwrap();
        s.write_all(b"A").unwrap();
        read_verdict(&mut s)
    });
    match exchange_timeout(&mut s, &card(0x11, 1), SHORT) {
        Err(Error::Card(CardError::BadMagic(m))) => assert_eq!(&m, b"HTTP"),
        other => panic!("{other:?}"),
    }
    let reason = h.join().unwrap().unwrap();
    assert!(reason.starts_with("not a vqp endpoint card"), "{reason}");

    // An implausible length is refused before anything is allocated for it, and the
    // peer is told.
    let (mut s, h) = raw_peer(|mut s| {
        s.write_all(&u32::MAX.to_be_bytes()).unwrap();
        read_frame(&mut s);
        read_verdict(&mut s)
    });
    let e = exchange_timeout(&mut s, &card(0x11, 1), SHORT).unwrap_err();
    match e {
        Error::PeerTooLong {
            what: "card",
            len: Some(len),
            limit,
        } => assert_eq!((len, limit), (u64::from(u32::MAX), MAX_FRAME)),
        ref other => panic!("{other:?}"),
    }
    assert_eq!(
        e.to_string(),
        "the peer announced a 4294967295-byte card; at most 65536 bytes are accepted"
    );
    assert_eq!(h.join().unwrap(), Some(e.to_string()));

    // An invalid card of ours is refused before anything is sent.
    let (mut s, h) = raw_peer(|mut s| {
        let mut sink = Vec::new();
        s.read_to_end(&mut sink).unwrap();
        sink
    });
    let mut bad = card(0x11, 1);
    bad.data.clear();
    assert!(matches!(
        exchange_timeout(&mut s, &bad, SHORT),
        Err(Error::Card(CardError::NoDataQps))
    ));
    drop(s);
    assert!(h.join().unwrap().is_empty());
}

#[test]
fn connect_gives_up_at_its_deadline() {
    // Nothing listens on a port just released.
    let port = listener().local_addr().unwrap().port();
    let start = Instant::now();
    let e = exchange::connect_timeout(("127.0.0.1", port), &card(0x11, 1), SHORT).unwrap_err();
    assert!(start.elapsed() >= SHORT && start.elapsed() < Duration::from_secs(2));
    assert!(
        matches!(
            e,
            Error::Exchange {
                stage: "connect to the peer",
                ..
            }
        ),
        "{e:?}"
    );
}
