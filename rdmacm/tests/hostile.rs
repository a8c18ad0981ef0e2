//! The CM as a network service facing hostile peers, in one process (as
//! `behaviour.rs`): a long random run of mutated messages of every type at a listener
//! and at the process's socket leaves an established connection and a pending one
//! untouched and the listener serving; a REP or REJ from a process that did not get the
//! REQ cannot take over a connecting id (communication ids are not guessable); a peer
//! whose socket never reads does not hold up other connections; a REQ replayed after
//! its connection ended is refused as stale; a requester that stalls after its REQ
//! times out alone; a flood of requests makes no more ids than the backlog.

mod common;

use core::ffi::c_void;
use core::ptr;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vqp_rdmacm::abi::{event, rdma_cm_id, rdma_event_channel};
use vqp_rdmacm::capi::*;
use vqp_rdmacm::wire::{self, Body, Kind, Message, Name, Private};

use common::*;

/// A small xorshift generator: the runs are repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The rendezvous directory's sockets folder, made if it is not there yet.
fn rd() -> PathBuf {
    setup();
    let d = dir().join("rdmacm");
    let _ = std::fs::create_dir_all(&d);
    d
}

fn listener_path(port: u16) -> PathBuf {
    rd().join(format!("l-106-4-7f000001-{port}"))
}

/// The sockets of this process's agent (`p<pid>-<n>`).
fn process_sockets() -> Vec<PathBuf> {
    std::fs::read_dir(rd())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('p'))
        .map(|e| e.path())
        .collect()
}

fn wire_conn(qpn: u32) -> wire::Conn {
    wire::Conn {
        qpn,
        qp_type: 2,
        psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        flow_control: 0,
        srq: 0,
        gid: [0; 16],
        lid: 1,
        mtu: 5,
        qkey: 0,
    }
}

fn req(name: &str, from: u32, port: u16, ps: u16) -> Message {
    Message {
        kind: Kind::Req,
        from,
        to: 0,
        name: Name::new(name).unwrap(),
        body: Body::Req {
            ps,
            conn: wire_conn(0x40),
            src: "127.0.0.1:1".parse().unwrap(),
            dst: format!("127.0.0.1:{port}").parse().unwrap(),
            private: Private::EMPTY,
        },
    }
}

fn bytes(m: &Message) -> Vec<u8> {
    let mut buf = [0u8; wire::MAX_MESSAGE];
    let n = wire::encode(m, &mut buf);
    buf[..n].to_vec()
}

/// A sender that gives up after `wait` when the receiver's queue stays full.
fn sender(wait: Duration) -> UnixDatagram {
    let s = UnixDatagram::unbound().unwrap();
    s.set_write_timeout(Some(wait)).unwrap();
    s
}

/// A socket of the test's in the rendezvous directory, named `name`.
fn bound(name: &str) -> UnixDatagram {
    let p = rd().join(name);
    let _ = std::fs::remove_file(&p);
    UnixDatagram::bind(p).unwrap()
}

/// Connects an id to `port` and lets the listener accept it, with QPs on both sides;
/// returns (client channel, client id, server id).
fn established(
    lch: *mut rdma_event_channel,
    port: u16,
) -> (*mut rdma_event_channel, *mut rdma_cm_id, *mut rdma_cm_id) {
    let (ch, id) = routed(port);
    qp(id);
    let p = param(b"hello");
    // SAFETY: a routed id with its QP.
    assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, 0);
    let r = expect(lch, event::CONNECT_REQUEST);
    qp(r.id);
    let a = param(&[]);
    // SAFETY: the request's id, with its QP.
    assert_eq!(unsafe { rdma_accept(r.id, &a as *const _ as *mut _) }, 0);
    expect(ch, event::ESTABLISHED);
    expect(lch, event::ESTABLISHED);
    (ch, id, r.id)
}

#[test]
fn a_long_random_run_leaves_other_connections_alone_and_the_listener_serving() {
    let port = port();
    let (lch, lid) = listener(port);
    let (ch, cid, sid) = established(lch, port);
    // A connect pending at a peer that takes its REQ and never answers.
    let silent_port = common::port();
    let silent = UnixDatagram::bind(listener_path(silent_port)).unwrap();
    let (pch, pid) = routed(silent_port);
    let p = param(&[]);
    // SAFETY: a routed id.
    assert_eq!(unsafe { rdma_connect(pid, &p as *const _ as *mut _) }, 0);
    let mut buf = [0u8; wire::MAX_MESSAGE];
    assert!(silent.recv(&mut buf).unwrap() > 0);

    // Valid messages of every type from a process of the test's, with the
    // communication ids a guesser would try, then mutated.
    // Its socket is read as the run goes (a peer that never reads is another test).
    let evil = bound("evil-fuzz");
    evil.set_nonblocking(true).unwrap();
    let mut models = Vec::new();
    for to in 0..64u32 {
        let r = req("evil-fuzz", to + 1, port, 0x106);
        models.push(r);
        for (kind, body) in [
            (
                Kind::Rep,
                Body::Rep {
                    conn: wire_conn(0x41),
                    status: 0,
                    private: Private::new(&[7; 100], wire::REP_PRIVATE).unwrap(),
                },
            ),
            (
                Kind::SidrRep,
                Body::Rep {
                    conn: wire_conn(0x41),
                    status: 0,
                    private: Private::EMPTY,
                },
            ),
            (
                Kind::Rej,
                Body::Rej {
                    reason: 28,
                    private: Private::EMPTY,
                },
            ),
            (Kind::Rtu, Body::Empty),
            (Kind::Dreq, Body::Empty),
            (Kind::Drep, Body::Empty),
        ] {
            models.push(Message {
                kind,
                to,
                body,
                ..r
            });
        }
    }
    let targets: Vec<PathBuf> = process_sockets()
        .into_iter()
        .chain([listener_path(port)])
        .collect();
    let s = sender(Duration::from_millis(200));
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    let mut requests = 0;
    for i in 0..20_000 {
        let m = &models[rng.below(models.len() as u64) as usize];
        let mut d = bytes(m);
        // Half are sent as they are, the others with a few bytes changed, cut or
        // lengthened.
        if i % 2 == 1 {
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(d.len() as u64) as usize;
                d[at] = rng.next() as u8;
            }
            match rng.below(4) {
                0 => d.truncate(rng.below(d.len() as u64) as usize),
                1 => d.extend((0..rng.below(600)).map(|_| rng.next() as u8)),
                _ => {}
            }
        }
        let to = &targets[rng.below(targets.len() as u64) as usize];
        let _ = s.send_to(&d, to);
        while evil.recv(&mut buf).is_ok() {}
        // Requests that decode are new requests, as a SYN is: the program rejects them.
        while let Some(e) = next(lch, 0) {
            assert_eq!(e.event, event::CONNECT_REQUEST, "{e:?}");
            // SAFETY: the request's id.
            assert_eq!(unsafe { rdma_reject(e.id, ptr::null::<c_void>(), 0) }, 0);
            destroy(e.id);
            requests += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    while let Some(e) = next(lch, 0) {
        assert_eq!(e.event, event::CONNECT_REQUEST, "{e:?}");
        // SAFETY: the request's id.
        assert_eq!(unsafe { rdma_reject(e.id, ptr::null::<c_void>(), 0) }, 0);
        destroy(e.id);
        requests += 1;
    }
    assert!(requests > 0, "the run reached the request path");
    // Nothing reached the established pair or the pending connect.
    assert!(next(ch, 0).is_none(), "the client saw an event");
    // The pending connect may only have timed out (the CM timeout is shorter than the
    // run): never established, rejected or refused by a forged answer.
    if let Some(e) = next(pch, 0) {
        assert_eq!(
            (e.event, e.status),
            (event::UNREACHABLE, -libc::ETIMEDOUT),
            "the pending connect saw {e:?}"
        );
    }
    // The established pair still disconnects as it should.
    // SAFETY: a connected id.
    assert_eq!(unsafe { rdma_disconnect(cid) }, 0);
    expect(ch, event::DISCONNECTED);
    expect(lch, event::DISCONNECTED);
    // The listener still serves a real request.
    let (ch2, id2) = routed(port);
    // SAFETY: a routed id.
    assert_eq!(unsafe { rdma_connect(id2, &p as *const _ as *mut _) }, 0);
    let r = expect(lch, event::CONNECT_REQUEST);
    // SAFETY: the new id.
    assert_eq!(unsafe { rdma_reject(r.id, ptr::null::<c_void>(), 0) }, 0);
    assert_eq!(expect(ch2, event::REJECTED).status, 28);
    for id in [r.id, id2, sid, cid, pid, lid] {
        destroy(id);
    }
    for c in [ch, ch2, pch, lch] {
        close(c);
    }
}

#[test]
fn a_rep_or_rej_from_a_process_that_did_not_get_the_req_is_dropped() {
    let port = port();
    let peer = UnixDatagram::bind(listener_path(port)).unwrap();
    let (ch, id) = routed(port);
    let p = param(&[]);
    // SAFETY: a routed id.
    assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, 0);
    let mut buf = [0u8; wire::MAX_MESSAGE];
    let n = peer.recv(&mut buf).unwrap();
    let got = wire::decode(&buf[..n]).unwrap();
    // Another process, which never saw the REQ, answers for every small id.
    let s = sender(Duration::from_secs(2));
    let to = rd().join(got.name.as_str());
    for guess in 1..=2048u32 {
        for (kind, body) in [
            (
                Kind::Rep,
                Body::Rep {
                    conn: wire_conn(0x99),
                    status: 0,
                    private: Private::EMPTY,
                },
            ),
            (
                Kind::Rej,
                Body::Rej {
                    reason: 28,
                    private: Private::EMPTY,
                },
            ),
        ] {
            let m = Message {
                kind,
                from: 5,
                to: guess,
                name: Name::new("evil-guess").unwrap(),
                body,
            };
            s.send_to(&bytes(&m), &to).unwrap();
        }
    }
    let e = next(ch, 300);
    assert!(e.is_none(), "a forged answer reached the id: {e:?}");
    // The real peer's answer still counts.
    let rej = Message {
        kind: Kind::Rej,
        from: 1,
        to: got.from,
        name: Name::new("evil-guess").unwrap(),
        body: Body::Rej {
            reason: 28,
            private: Private::EMPTY,
        },
    };
    peer.send_to(&bytes(&rej), &to).unwrap();
    assert_eq!(expect(ch, event::REJECTED).status, 28);
    destroy(id);
    close(ch);
    let _ = std::fs::remove_file(listener_path(port));
}

#[test]
fn a_peer_whose_socket_never_reads_does_not_hold_up_other_connections() {
    let port = port();
    let (lch, lid) = listener(port);
    // A process of the test's whose socket is never read: every answer to it finds a
    // full queue after the first few.
    let _stalled = bound("evil-stall");
    let lpath = listener_path(port);
    let procs = process_sockets();
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let s = sender(Duration::from_millis(100));
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) && i < 200 {
                i += 1;
                // A REQ for another port space: answered with a REJ (reason 8).
                let _ = s.send_to(&bytes(&req("evil-stall", i, port, 0x111)), &lpath);
                // A DREQ for no connection: answered with a DREP.
                let dreq = Message {
                    kind: Kind::Dreq,
                    from: i,
                    to: i,
                    name: Name::new("evil-stall").unwrap(),
                    body: Body::Empty,
                };
                for p in &procs {
                    let _ = s.send_to(&bytes(&dreq), p);
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let (ch, id) = routed(port);
    let p = param(&[]);
    // SAFETY: a routed id.
    assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, 0);
    let r = next(lch, 5000);
    let took = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    let r = r.expect("no CONNECT_REQUEST within 5 s");
    assert_eq!(r.event, event::CONNECT_REQUEST);
    assert!(took < Duration::from_secs(2), "the request took {took:?}");
    // SAFETY: the new id.
    assert_eq!(unsafe { rdma_reject(r.id, ptr::null::<c_void>(), 0) }, 0);
    assert_eq!(expect(ch, event::REJECTED).status, 28);
    destroy(r.id);
    destroy(id);
    destroy(lid);
    close(ch);
    close(lch);
}

/// Receives the next message on `s` within `ms`.
fn recv(s: &UnixDatagram, ms: u64) -> Option<Message> {
    s.set_read_timeout(Some(Duration::from_millis(ms))).unwrap();
    let mut buf = [0u8; wire::MAX_MESSAGE];
    let n = s.recv(&mut buf).ok()?;
    wire::decode(&buf[..n]).ok()
}

#[test]
fn a_req_replayed_after_its_connection_ended_is_refused_as_stale() {
    let port = port();
    let (lch, lid) = listener(port);
    let me = bound("evil-replay");
    let lpath = listener_path(port);
    let the_req = bytes(&req("evil-replay", 77, port, 0x106));
    me.send_to(&the_req, &lpath).unwrap();
    let r = expect(lch, event::CONNECT_REQUEST);
    let a = param(&[]);
    // SAFETY: the request's id (no QP: the peer makes its own).
    assert_eq!(unsafe { rdma_accept(r.id, &a as *const _ as *mut _) }, 0);
    let rep = recv(&me, 2000).expect("a REP");
    assert_eq!(rep.kind, Kind::Rep);
    let mut rtu = Message {
        kind: Kind::Rtu,
        from: 77,
        to: rep.from,
        name: Name::new("evil-replay").unwrap(),
        body: Body::Empty,
    };
    me.send_to(&bytes(&rtu), rd().join(rep.name.as_str()))
        .unwrap();
    expect(lch, event::ESTABLISHED);
    rtu.kind = Kind::Dreq;
    me.send_to(&bytes(&rtu), rd().join(rep.name.as_str()))
        .unwrap();
    assert_eq!(recv(&me, 2000).map(|m| m.kind), Some(Kind::Drep));
    expect(lch, event::DISCONNECTED);
    expect(lch, event::TIMEWAIT_EXIT);
    destroy(r.id);
    // The same REQ again (a captured one replayed, or a duplicate that came late).
    me.send_to(&the_req, &lpath).unwrap();
    let e = next(lch, 500);
    assert!(e.is_none(), "a replayed REQ made a new request: {e:?}");
    match recv(&me, 2000) {
        Some(Message {
            kind: Kind::Rej,
            body: Body::Rej { reason, .. },
            ..
        }) => assert_eq!(reason, 10, "stale connection"),
        other => panic!("{other:?}"),
    }
    // A new REQ of the same peer (another communication id) is served.
    me.send_to(&bytes(&req("evil-replay", 78, port, 0x106)), &lpath)
        .unwrap();
    let r = expect(lch, event::CONNECT_REQUEST);
    // SAFETY: the new id.
    assert_eq!(unsafe { rdma_reject(r.id, ptr::null::<c_void>(), 0) }, 0);
    destroy(r.id);
    destroy(lid);
    close(lch);
    let _ = Path::new(&lpath);
}

#[test]
fn a_requester_that_stalls_after_its_req_times_out_alone() {
    let port = port();
    let (lch, lid) = listener(port);
    let me = bound("evil-stall-req");
    me.set_nonblocking(true).unwrap();
    me.send_to(
        &bytes(&req("evil-stall-req", 5, port, 0x106)),
        listener_path(port),
    )
    .unwrap();
    let r = expect(lch, event::CONNECT_REQUEST);
    let a = param(&[]);
    let start = Instant::now();
    // SAFETY: the request's id (its peer makes its own QP).
    assert_eq!(unsafe { rdma_accept(r.id, &a as *const _ as *mut _) }, 0);
    // Meanwhile another client connects and is served at once.
    let (ch, id, sid) = established(lch, port);
    assert!(start.elapsed() < CM_TIMEOUT / 2);
    // The REP is never answered: UNREACHABLE after the CM timeout, for that id only.
    let e = next(lch, (CM_TIMEOUT.as_millis() * 2) as i32).expect("an event");
    assert_eq!(
        (e.event, e.status, e.id),
        (event::UNREACHABLE, -libc::ETIMEDOUT, r.id)
    );
    assert!(start.elapsed() >= CM_TIMEOUT, "{:?}", start.elapsed());
    assert!(next(ch, 0).is_none());
    // SAFETY: a connected id.
    assert_eq!(unsafe { rdma_disconnect(id) }, 0);
    expect(ch, event::DISCONNECTED);
    for i in [r.id, sid, id, lid] {
        destroy(i);
    }
    close(ch);
    close(lch);
}

#[test]
fn a_flood_of_requests_is_bounded_by_the_backlog_and_the_listener_recovers() {
    let port = port();
    let (lch, lid) = listener(port); // backlog 8
    let me = bound("evil-flood");
    me.set_nonblocking(true).unwrap();
    let s = sender(Duration::from_millis(200));
    let (mut rejected, mut buf) = (0, [0u8; wire::MAX_MESSAGE]);
    for i in 0..2000u32 {
        let _ = s.send_to(
            &bytes(&req("evil-flood", 1000 + i, port, 0x106)),
            listener_path(port),
        );
        while let Ok(n) = me.recv(&mut buf) {
            if let Ok(Message {
                body: Body::Rej { reason, .. },
                ..
            }) = wire::decode(&buf[..n])
            {
                assert_eq!(reason, 3, "no resources");
                rejected += 1;
            }
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    while let Ok(n) = me.recv(&mut buf) {
        if wire::decode(&buf[..n]).is_ok_and(|m| m.kind == Kind::Rej) {
            rejected += 1;
        }
    }
    let mut requests = Vec::new();
    while let Some(e) = next(lch, 0) {
        assert_eq!(e.event, event::CONNECT_REQUEST);
        requests.push(e.id);
    }
    assert_eq!(requests.len(), 8, "the backlog bounds what a flood makes");
    assert!(rejected > 1000, "{rejected} REJs");
    for r in requests {
        // SAFETY: a request's id.
        assert_eq!(unsafe { rdma_reject(r, ptr::null::<c_void>(), 0) }, 0);
        destroy(r);
    }
    // The backlog is free again: a real client is served.
    let (ch, id, sid) = established(lch, port);
    for i in [sid, id, lid] {
        destroy(i);
    }
    close(ch);
    close(lch);
}
