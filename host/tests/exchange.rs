//! Exchanging endpoint cards over TCP on 127.0.0.1.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use vqp_core::Mode;
use vqp_host::exchange::{self, barrier, exchange_timeout, serve_on};
use vqp_host::{Capabilities, Card, CardError, Error, Gid, PortAddr, QpAddr};

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

fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
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

/// A raw peer that accepts, then runs `act` on the stream.
fn raw_peer(act: impl FnOnce(TcpStream) + Send + 'static) -> (TcpStream, thread::JoinHandle<()>) {
    let l = listener();
    let addr = l.local_addr().unwrap();
    let h = thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        act(s);
    });
    (TcpStream::connect(addr).unwrap(), h)
}

/// Reads the frame the side under test sends, so that closing afterwards is a clean
/// FIN (closing with unread data would be a reset).
fn read_frame(s: &mut TcpStream) {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut card = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut card).unwrap();
}

#[test]
fn a_peer_that_disconnects_mid_exchange_is_a_typed_error() {
    // Half a length prefix, then gone.
    let (mut s, h) = raw_peer(|mut s| {
        read_frame(&mut s);
        s.write_all(&[0, 0]).unwrap();
    });
    match exchange_timeout(&mut s, &card(0x11, 2), Duration::from_secs(5)) {
        Err(e @ Error::Exchange { .. }) => {
            let Error::Exchange { ref source, .. } = e else {
                unreachable!()
            };
            assert_eq!(source.kind(), ErrorKind::UnexpectedEof, "{e}");
            assert!(e.to_string().contains("card length"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    h.join().unwrap();

    // A length, then half a card.
    let (mut s, h) = raw_peer(|mut s| {
        read_frame(&mut s);
        let bytes = card(9, 2).to_bytes().unwrap();
        s.write_all(&(bytes.len() as u32).to_be_bytes()).unwrap();
        s.write_all(&bytes[..30]).unwrap();
    });
    match exchange_timeout(&mut s, &card(0x11, 2), Duration::from_secs(5)) {
        Err(Error::Exchange { stage, source }) => {
            assert_eq!(source.kind(), ErrorKind::UnexpectedEof);
            assert_eq!(stage, "receive the peer's card");
        }
        other => panic!("{other:?}"),
    }
    h.join().unwrap();
}

#[test]
fn a_silent_peer_times_out() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (mut s, h) = raw_peer(move |s| {
        let _ = rx.recv(); // hold the connection open, say nothing
        drop(s);
    });
    match exchange_timeout(&mut s, &card(0x11, 1), Duration::from_millis(100)) {
        Err(Error::Exchange { source, .. }) => assert!(
            matches!(source.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{source:?}"
        ),
        other => panic!("{other:?}"),
    }
    tx.send(()).unwrap();
    h.join().unwrap();
}

#[test]
fn malformed_frames_are_refused() {
    // Not a card.
    let (mut s, h) = raw_peer(|mut s| {
        read_frame(&mut s);
        let mut frame = 8u32.to_be_bytes().to_vec();
        frame.extend_from_slice(b"HTTP/1.1");
        s.write_all(&frame).unwrap();
    });
    match exchange_timeout(&mut s, &card(0x11, 1), Duration::from_secs(5)) {
        Err(Error::Card(CardError::BadMagic(m))) => assert_eq!(&m, b"HTTP"),
        other => panic!("{other:?}"),
    }
    h.join().unwrap();

    // An implausible length is refused before anything is allocated for it.
    let (mut s, h) = raw_peer(|mut s| {
        s.write_all(&u32::MAX.to_be_bytes()).unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    });
    match exchange_timeout(&mut s, &card(0x11, 1), Duration::from_secs(5)) {
        Err(Error::Exchange { source, .. }) => assert_eq!(source.kind(), ErrorKind::InvalidData),
        other => panic!("{other:?}"),
    }
    drop(s);
    h.join().unwrap();

    // An invalid card of ours is refused before anything is sent.
    let (mut s, h) = raw_peer(|_| {});
    let mut bad = card(0x11, 1);
    bad.data.clear();
    assert!(matches!(
        exchange_timeout(&mut s, &bad, Duration::from_secs(1)),
        Err(Error::Card(CardError::NoDataQps))
    ));
    h.join().unwrap();
}
