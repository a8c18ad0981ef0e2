//! Cards through the RDMA connection manager (vqp-rdmacm on softverbs, in one process,
//! client and server on two threads): the whole card crosses both ways for 1 and 8 QPs
//! in both modes; a card the server does not agree with is refused on both sides with
//! the reason; nobody listening, an address of no interface and a server that never
//! answers are each a typed error within the timeout.
//!
//! Not in the `linked` build: there softverbs is this crate's dev-dependency without
//! its C symbols, so it cannot stand in for libibverbs under vqp-rdmacm; the workspace
//! run has them.
#![cfg(not(feature = "linked"))]

use std::net::SocketAddr;
use std::sync::Once;
use std::thread;
use std::time::{Duration, Instant};

use vqp_core::Mode;
use vqp_host::cm::{self, CmError, CmListener};
use vqp_host::loader::cm::RdmaCm;
use vqp_host::sys::Gid;
use vqp_host::{Capabilities, Card, CardError, Error, PortAddr, QpAddr};

const T: Duration = Duration::from_secs(5);

fn built(krate: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(std::path::Path::parent).unwrap();
    let name = format!(
        "{}{krate}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    // `cargo build` copies it up to the profile directory; a workspace test run leaves
    // it in `deps/` only (with the features of the whole workspace, C symbols included).
    let candidates = [profile.join(&name), profile.join("deps").join(&name)];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{name} is missing at {candidates:?}: build it with `cargo build -p vqp-softverbs -p vqp-rdmacm`"
            )
        })
}

/// This process's softverbs namespace directory.
fn namespace_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("vqp-host-cm-{}", std::process::id()))
}

/// Removes [`namespace_dir`] when the process exits (the tests share it).
extern "C" fn remove_namespace_dir() {
    let _ = std::fs::remove_dir_all(namespace_dir());
}

fn rdmacm() -> RdmaCm {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a function that takes nothing and returns.
        unsafe { libc::atexit(remove_namespace_dir) };
        std::env::set_var("VQP_SOFT_DIR", namespace_dir());
        std::env::set_var("VQP_IBVERBS_PATH", built("vqp_softverbs"));
        std::env::set_var("VQP_RDMACM_TIMEOUT_MS", "2000");
    });
    // SAFETY: vqp-rdmacm's library, a librdmacm.
    unsafe { RdmaCm::load_from(&built("vqp_rdmacm")) }.expect("vqp-rdmacm loads")
}

fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn card(mode: Mode, n: u32, first_qpn: u32) -> Card {
    Card {
        mode,
        caps: Capabilities::supported(),
        required: Capabilities::required_for(mode),
        max_frag: 64 << 10,
        max_outstanding: 16,
        recv_depth: 8,
        window: 1024,
        init_seq: first_qpn * 3,
        ports: vec![PortAddr {
            mtu: 4096,
            lid: 7,
            gid: Gid::from_bytes([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
        }],
        data: (0..n)
            .map(|i| QpAddr {
                qpn: first_qpn + i,
                psn: 0x1000 + first_qpn + i,
                port: 0,
            })
            .collect(),
        notify: (mode == Mode::Spray && n > 1).then_some(QpAddr {
            qpn: first_qpn + 0x80,
            psn: 0xfff,
            port: 0,
        }),
    }
}

#[test]
fn whole_cards_cross_both_ways_in_both_modes() {
    let cm = rdmacm();
    for (mode, n) in [
        (Mode::Dqplb, 1),
        (Mode::Dqplb, 8),
        (Mode::Spray, 1),
        (Mode::Spray, 8),
    ] {
        let addr: SocketAddr = format!("127.0.0.1:{}", port()).parse().unwrap();
        let server_card = card(mode, n, 0x200);
        let client_card = card(mode, n, 0x400);
        let mut l = CmListener::bind(&cm, addr).unwrap();
        let sc = server_card.clone();
        let server = thread::spawn(move || {
            let got = l.request(&sc, T).unwrap();
            let conn = l.accept(&sc, T).unwrap();
            (got, conn)
        });
        let (got, dialled) = cm::connect(&cm, addr, &client_card, T).unwrap();
        assert_eq!(got, server_card, "{mode:?} {n}");
        let _client = dialled.establish().unwrap();
        let (seen, _conn) = server.join().unwrap();
        assert_eq!(seen, client_card, "{mode:?} {n}");
    }
}

#[test]
fn a_card_the_server_does_not_agree_with_is_refused_on_both_sides() {
    let cm = rdmacm();
    let addr: SocketAddr = format!("127.0.0.1:{}", port()).parse().unwrap();
    let mut l = CmListener::bind(&cm, addr).unwrap();
    let server = thread::spawn(move || l.request(&card(Mode::Dqplb, 2, 0x200), T));
    let e = cm::connect(&cm, addr, &card(Mode::Dqplb, 3, 0x400), T).unwrap_err();
    let s = server.join().unwrap().unwrap_err();
    let Error::Card(ce) = &s else { panic!("{s:?}") };
    assert!(matches!(ce, CardError::DataQps { .. }), "{ce:?}");
    match e {
        Error::PeerRefused { reason } => assert_eq!(reason, ce.to_string()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn nobody_listening_is_rejected_with_reason_8() {
    let cm = rdmacm();
    let addr: SocketAddr = format!("127.0.0.1:{}", port()).parse().unwrap();
    let start = Instant::now();
    let e = cm::connect(&cm, addr, &card(Mode::Dqplb, 1, 0x400), T).unwrap_err();
    assert!(
        matches!(e, Error::RdmaCm(CmError::Rejected { status: 8 })),
        "{e:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn an_address_of_no_interface_fails_within_the_timeout() {
    let cm = rdmacm();
    let start = Instant::now();
    let t = Duration::from_millis(500);
    let e = cm::connect(
        &cm,
        "192.0.2.1:7174".parse().unwrap(),
        &card(Mode::Dqplb, 1, 1),
        t,
    )
    .unwrap_err();
    match &e {
        Error::RdmaCm(CmError::Event { stage, status, .. }) => {
            assert_eq!(*stage, "resolve the address");
            assert_eq!(*status, -libc::ETIMEDOUT);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        start.elapsed() >= t && start.elapsed() < t * 4,
        "{:?}",
        start.elapsed()
    );
    assert!(e.to_string().contains("RDMA_CM_EVENT_ADDR_ERROR"), "{e}");
}

#[test]
fn a_server_that_never_answers_is_a_timeout() {
    let cm = rdmacm();
    let addr: SocketAddr = format!("127.0.0.1:{}", port()).parse().unwrap();
    // Listening, never taking the request.
    let _l = CmListener::bind(&cm, addr).unwrap();
    let t = Duration::from_millis(700);
    let start = Instant::now();
    let e = cm::connect(&cm, addr, &card(Mode::Dqplb, 1, 0x400), t).unwrap_err();
    assert!(
        matches!(
            e,
            Error::RdmaCm(CmError::Timeout {
                stage: "connect",
                ..
            })
        ),
        "{e:?}"
    );
    assert!(
        start.elapsed() >= t && start.elapsed() < t * 4,
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_client_that_gives_up_after_the_replies_fails_the_servers_accept_quickly() {
    let cm = rdmacm();
    let addr: SocketAddr = format!("127.0.0.1:{}", port()).parse().unwrap();
    let mut l = CmListener::bind(&cm, addr).unwrap();
    let server = thread::spawn(move || {
        let sc = card(Mode::Dqplb, 2, 0x200);
        let _ = l.request(&sc, T).unwrap();
        let start = Instant::now();
        (l.accept(&sc, T), start.elapsed())
    });
    let (_, dialled) = cm::connect(&cm, addr, &card(Mode::Dqplb, 2, 0x400), T).unwrap();
    // Gone before its RTUs (its ids destroyed: a DREQ each).
    drop(dialled);
    let (r, took) = server.join().unwrap();
    let e = r.unwrap_err();
    assert!(
        matches!(
            &e,
            Error::RdmaCm(CmError::Event {
                stage: "wait for the client's RTU",
                ..
            })
        ),
        "{e:?}"
    );
    assert!(took < T / 2, "{took:?}");
}

#[test]
fn a_server_that_goes_away_before_replying_fails_the_connect_quickly() {
    let cm = rdmacm();
    let addr: SocketAddr = format!("127.0.0.1:{}", port()).parse().unwrap();
    let mut l = CmListener::bind(&cm, addr).unwrap();
    let server = thread::spawn(move || {
        let _ = l.request(&card(Mode::Spray, 4, 0x200), T).unwrap();
        // Gone without a reply: its pending requests are rejected as it goes.
        drop(l);
    });
    let start = Instant::now();
    let e = cm::connect(&cm, addr, &card(Mode::Spray, 4, 0x400), T).unwrap_err();
    server.join().unwrap();
    assert!(
        matches!(e, Error::RdmaCm(CmError::Rejected { .. })),
        "{e:?}"
    );
    assert!(start.elapsed() < T / 2, "{:?}", start.elapsed());
}

/// A client of the test's own that connects only the first QP of a 2-QP card, tagged
/// `tag`, and never the second: its id and channel, kept until dropped.
struct HalfCard {
    cm: RdmaCm,
    ch: *mut vqp_host::sys::cm::rdma_event_channel,
    id: *mut vqp_host::sys::cm::rdma_cm_id,
}

impl HalfCard {
    fn new(cm: &RdmaCm, addr: SocketAddr, tag: u32) -> HalfCard {
        use vqp_host::sys::cm::{event, rdma_conn_param, RDMA_PS_TCP};
        let t = cm.table();
        let wait = |ch: *mut vqp_host::sys::cm::rdma_event_channel, want: u32| {
            // SAFETY: a live channel; the event is copied out, then acknowledged.
            unsafe {
                let mut p = libc::pollfd {
                    fd: (*ch).fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                assert_eq!(libc::poll(&mut p, 1, 5000), 1);
                let mut e = std::ptr::null_mut();
                assert_eq!((t.rdma_get_cm_event)(ch, &mut e), 0);
                assert_eq!((*e).event, want);
                (t.rdma_ack_cm_event)(e);
            }
        };
        let piece = cm::piece::Piece::split(&card(Mode::Dqplb, 2, 0x600), tag).unwrap()[0];
        let bytes = piece.encode();
        // SAFETY: rdma_cma.h's sequence on a channel and an id of the test's own.
        unsafe {
            let ch = (t.rdma_create_event_channel)();
            let mut id = std::ptr::null_mut();
            assert_eq!(
                (t.rdma_create_id)(ch, &mut id, std::ptr::null_mut(), RDMA_PS_TCP),
                0
            );
            let mut dst: libc::sockaddr_in = core::mem::zeroed();
            dst.sin_family = libc::AF_INET as libc::sa_family_t;
            dst.sin_port = addr.port().to_be();
            dst.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
            let dp = (&mut dst as *mut libc::sockaddr_in).cast();
            assert_eq!((t.rdma_resolve_addr)(id, std::ptr::null_mut(), dp, 2000), 0);
            wait(ch, event::ADDR_RESOLVED);
            assert_eq!((t.rdma_resolve_route)(id, 2000), 0);
            wait(ch, event::ROUTE_RESOLVED);
            let mut p = rdma_conn_param {
                private_data: bytes.as_ptr().cast(),
                private_data_len: bytes.len() as u8,
                responder_resources: 1,
                initiator_depth: 1,
                flow_control: 0,
                retry_count: 7,
                rnr_retry_count: 7,
                srq: 0,
                qp_num: 0x600,
            };
            assert_eq!((t.rdma_connect)(id, &mut p), 0);
            HalfCard {
                cm: cm.clone(),
                ch,
                id,
            }
        }
    }
}

impl Drop for HalfCard {
    fn drop(&mut self) {
        let t = self.cm.table();
        // SAFETY: the test's own id and channel, not used again.
        unsafe {
            (t.rdma_destroy_id)(self.id);
            (t.rdma_destroy_event_channel)(self.ch);
        }
    }
}

#[test]
fn clients_that_never_finish_their_card_do_not_lock_others_out() {
    let cm = rdmacm();
    let addr: SocketAddr = format!("127.0.0.1:{}", port()).parse().unwrap();
    let mut l = CmListener::bind(&cm, addr).unwrap();
    let halves: Vec<HalfCard> = (0..cm::MAX_SESSIONS as u32 + 4)
        .map(|tag| HalfCard::new(&cm, addr, 0x10_0000 + tag))
        .collect();
    let server = thread::spawn(move || {
        let sc = card(Mode::Dqplb, 2, 0x200);
        let got = l.request(&sc, T);
        let conn = got.as_ref().ok().map(|_| l.accept(&sc, T));
        (got, conn.map(|c| c.is_ok()))
    });
    let mine = card(Mode::Dqplb, 2, 0x400);
    let (_, dialled) = cm::connect(&cm, addr, &mine, T).unwrap();
    let _c = dialled.establish().unwrap();
    let (got, accepted) = server.join().unwrap();
    assert_eq!(got.unwrap(), mine);
    assert_eq!(accepted, Some(true));
    drop(halves);
}

#[test]
fn a_server_card_the_client_refuses_is_refused_on_both_sides() {
    let cm = rdmacm();
    let addr: SocketAddr = format!("127.0.0.1:{}", port()).parse().unwrap();
    let mut l = CmListener::bind(&cm, addr).unwrap();
    // The server's card names a port MTU that is no InfiniBand MTU: the server does not
    // check its own card, the client does (Card::validate).
    let mut bad = card(Mode::Dqplb, 1, 0x200);
    bad.ports[0].mtu = 1000;
    let server = thread::spawn(move || {
        let _ = l.request(&bad, T).unwrap();
        l.accept(&bad, T)
    });
    let e = cm::connect(&cm, addr, &card(Mode::Dqplb, 1, 0x400), T).unwrap_err();
    let Error::Card(ce) = &e else { panic!("{e:?}") };
    match server.join().unwrap().unwrap_err() {
        Error::PeerRefused { reason } => assert_eq!(reason, ce.to_string()),
        other => panic!("{other:?}"),
    }
}
