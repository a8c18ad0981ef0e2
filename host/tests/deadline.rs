//! `vqp_host::exchange::DeadlineStream`: one deadline for a whole message, byte
//! limits, and the errors that say what the peer did.

mod peer;

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use vqp_host::exchange::DeadlineStream;
use vqp_host::Error;

use peer::{raw_peer, trickle, SHORT};

#[test]
fn a_line_has_a_deadline_and_a_limit_and_consumes_nothing_after_it() {
    // A line, then 5 bytes that are not part of it.
    let (s, h) = raw_peer(|mut s| s.write_all(b"mode=dqplb qps=4\nHELLO").unwrap());
    let mut io = DeadlineStream::new(&s, SHORT).unwrap();
    assert_eq!(
        io.read_line(64, "parameter line").unwrap(),
        "mode=dqplb qps=4"
    );
    let mut rest = [0u8; 5];
    io.read_exact(&mut rest, "greeting").unwrap();
    assert_eq!(&rest, b"HELLO");
    h.join().unwrap();

    // Exactly the limit passes; one byte more does not.
    let (s, h) = raw_peer(|mut s| s.write_all(b"abcd\nabcde\n").unwrap());
    let mut io = DeadlineStream::new(&s, SHORT).unwrap();
    assert_eq!(io.read_line(4, "line").unwrap(), "abcd");
    let e = io.read_line(4, "line").unwrap_err();
    assert_eq!(e.to_string(), "the peer's line is longer than 4 bytes");
    h.join().unwrap();

    // Not UTF-8.
    let (s, h) = raw_peer(|mut s| s.write_all(b"\xff\xfe\n").unwrap());
    let mut io = DeadlineStream::new(&s, SHORT).unwrap();
    assert!(matches!(
        io.read_line(64, "line"),
        Err(Error::PeerMalformed { what: "line", .. })
    ));
    h.join().unwrap();

    // The peer closes mid-line.
    let (s, h) = raw_peer(|mut s| s.write_all(b"mode=").unwrap());
    let mut io = DeadlineStream::new(&s, SHORT).unwrap();
    let e = io.read_line(64, "parameter line").unwrap_err();
    assert_eq!(
        e.to_string(),
        "the peer closed the connection after 5 bytes of its parameter line"
    );
    h.join().unwrap();
}

#[test]
fn a_trickled_line_is_cut_off_at_the_deadline() {
    // One byte every 40 ms: each read is well inside the 300 ms timeout, the line
    // (22 bytes, 0.9 s) is not.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let line = b"a long parameter line\n";
    let (s, h) = raw_peer(move |mut s| {
        s.write_all(&line[..2]).unwrap();
        2 + trickle(&mut s, &line[2..], Duration::from_millis(40), &done_rx)
    });
    let start = Instant::now();
    let mut io = DeadlineStream::new(&s, SHORT).unwrap();
    let e = io.read_line(512, "parameter line").unwrap_err();
    let took = start.elapsed();
    assert!(
        took >= SHORT && took < Duration::from_millis(800),
        "{took:?}"
    );
    assert!(
        matches!(e, Error::PeerTimeout { what: "parameter line", got, .. } if got >= 2),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with("no whole parameter line from the peer within 300 ms: "),
        "{e}"
    );
    drop(io);
    done_tx.send(()).unwrap();
    drop(s);
    assert!(h.join().unwrap() < line.len());
}

#[test]
fn a_frame_longer_than_its_limit_is_refused_before_it_is_read() {
    let (s, h) = raw_peer(|mut s| {
        s.write_all(&1000u32.to_be_bytes()).unwrap();
        s.write_all(&[0; 1000]).unwrap();
    });
    let mut io = DeadlineStream::new(&s, SHORT).unwrap();
    let e = io.read_frame(999, "result").unwrap_err();
    assert_eq!(
        e.to_string(),
        "the peer announced a 1000-byte result; at most 999 bytes are accepted"
    );
    h.join().unwrap();

    let (s, h) = raw_peer(|mut s| {
        s.write_all(&3u32.to_be_bytes()).unwrap();
        s.write_all(b"abc").unwrap();
    });
    let mut io = DeadlineStream::new(&s, SHORT).unwrap();
    assert_eq!(io.read_frame(3, "result").unwrap(), b"abc");
    h.join().unwrap();
}

#[test]
fn a_deadline_stream_restores_the_timeouts_and_reports_plain_reads() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (s, h) = raw_peer(move |mut s| {
        s.write_all(b"xy").unwrap();
        let _ = rx.recv();
    });
    s.set_read_timeout(Some(Duration::from_secs(7))).unwrap();
    {
        let mut io = DeadlineStream::new(&s, SHORT).unwrap();
        assert!(io.remaining() <= SHORT && io.timeout() == SHORT);
        let mut b = [0u8; 2];
        io.read_exact(&mut b, "pair").unwrap();
        // `Read`: the next read waits only the time left, then says TimedOut.
        let start = Instant::now();
        let e = loop {
            match io.read(&mut b) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => break e,
                Ok(n) => panic!("read {n}"),
            }
        };
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(start.elapsed() < Duration::from_millis(500));
    }
    assert_eq!(s.read_timeout().unwrap(), Some(Duration::from_secs(7)));
    assert!(matches!(
        DeadlineStream::new(&s, Duration::ZERO),
        Err(Error::InvalidArgument { .. })
    ));
    tx.send(()).unwrap();
    h.join().unwrap();
}

#[test]
fn a_peer_that_does_not_read_cannot_hold_a_write() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (s, h) = raw_peer(move |s| {
        let _ = rx.recv(); // never reads
        drop(s);
    });
    let big = vec![0u8; 64 << 20]; // more than both socket buffers hold
    let start = Instant::now();
    let mut io = DeadlineStream::new(&s, SHORT).unwrap();
    let e = io.write_all(&big, "buffer").unwrap_err();
    assert!(start.elapsed() < Duration::from_millis(1500));
    match &e {
        Error::PeerIo {
            what: "buffer",
            sending: true,
            source,
        } => assert_eq!(source.kind(), ErrorKind::TimedOut),
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("sending this side's buffer to the peer failed: the peer took "),
        "{e}"
    );
    drop(io);
    tx.send(()).unwrap();
    h.join().unwrap();
}

#[test]
fn a_whole_message_goes_out_and_comes_back() {
    let (s, h) = raw_peer(|mut s| {
        let mut b = [0u8; 3];
        s.read_exact(&mut b).unwrap();
        s.write_all(&b).unwrap();
    });
    let mut io = DeadlineStream::new(&s, SHORT).unwrap();
    io.write_all(b"abc", "echo").unwrap();
    let mut b = [0u8; 3];
    io.read_exact(&mut b, "echo").unwrap();
    assert_eq!(&b, b"abc");
    // The stream is only borrowed: the caller keeps it for what follows.
    drop(io);
    assert_eq!(s.read_timeout().unwrap(), None);
    h.join().unwrap();
}
