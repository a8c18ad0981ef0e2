//! vqp-rdmacm's behaviour, in one process (the library linked in, softverbs' cdylib as
//! libibverbs through `VQP_IBVERBS_PATH`, a rendezvous directory of the test's own):
//! the event channel is a pollable descriptor that honours `O_NONBLOCK`; a connection
//! to a port nobody listens on is REJECTED with IB's reason 8; a reject carries reason
//! 28 and its private data, and the private-data limits are enforced; accept with 196
//! bytes connects two QPs to RTS, a disconnect reaches both sides and each then leaves
//! its time-wait; malformed and forged messages are dropped without an event; a
//! listener that never answers makes the connect UNREACHABLE (-ETIMEDOUT) after the CM
//! timeout, and one whose process is gone makes it so well before; an address of no
//! local interface gives ADDR_ERROR (-ETIMEDOUT) after the caller's timeout; AFONLY is
//! honoured; bad calls (null pointers, ids in the wrong state, other address families)
//! fail with their errno; `rdma_create_ep` makes XRC send QPs for XRC addresses, and an
//! RC request to an XRC listener (or the other way round) is REJECTED with reason 9.

mod common;

use core::ffi::c_void;
use core::ptr;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use vqp_rdmacm::abi::{self, event, rdma_cm_id};
use vqp_rdmacm::capi::*;
use vqp_rdmacm::wire;
use vqp_sys::{ibv_qp_init_attr, IBV_QPS_RTS};

use common::*;

#[test]
fn the_event_channel_is_pollable_and_honours_o_nonblock() {
    let ch = channel();
    // SAFETY: the channel is live.
    let fd = unsafe { (*ch).fd };
    // SAFETY: fcntl on the channel's descriptor.
    unsafe {
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        )
    };
    let mut e = ptr::null_mut();
    // SAFETY: a live channel, an out-pointer.
    assert_eq!(unsafe { rdma_get_cm_event(ch, &mut e) }, -1);
    assert_eq!(errno(), libc::EAGAIN);
    assert!(!readable(ch, 0));
    let id = create_id(ch);
    let mut dst = c_addr("127.0.0.1:9");
    // SAFETY: the id and a valid address.
    assert_eq!(
        unsafe { rdma_resolve_addr(id, ptr::null_mut(), sa(&mut dst), 500) },
        0
    );
    // epoll sees it too.
    // SAFETY: plain epoll calls on descriptors of the test's.
    unsafe {
        let ep = libc::epoll_create1(0);
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 7,
        };
        assert_eq!(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev), 0);
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 1];
        assert_eq!(libc::epoll_wait(ep, out.as_mut_ptr(), 1, 2000), 1);
        assert_eq!({ out[0].u64 }, 7);
        libc::close(ep);
    }
    let e = next(ch, 0).expect("the event");
    assert_eq!(e.event, event::ADDR_RESOLVED);
    assert_eq!(e.id, id);
    assert!(!readable(ch, 0), "one event, one readable count");
    // SAFETY: the id, its route asked for; its port and address read back.
    unsafe {
        assert_eq!(rdma_resolve_route(id, 500), 0);
        assert_eq!(u16::from_be(rdma_get_dst_port(id)), 9);
        assert!(!(*id).verbs.is_null() && (*id).port_num == 1);
    }
    expect(ch, event::ROUTE_RESOLVED);
    // SAFETY: the route's path record is set.
    assert_eq!(unsafe { (*id).route.num_paths }, 1);
    destroy(id);
    close(ch);
}

#[test]
fn a_connect_nobody_listens_for_is_rejected_with_reason_8() {
    let (ch, id) = routed(port());
    let p = param(&[]);
    // SAFETY: a routed id and valid parameters.
    assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, 0);
    let e = expect(ch, event::REJECTED);
    assert_eq!(e.status, 8);
    destroy(id);
    close(ch);
}

/// An id that is only bound is not yet found as a listener (a REQ to it is refused as
/// nobody's): its listener name appears in the rendezvous directory at `rdma_listen`,
/// and goes with the id.
#[test]
fn a_bound_id_is_found_as_a_listener_only_once_it_listens() {
    let port = port();
    let names = || -> Vec<String> {
        std::fs::read_dir(dir().join("rdmacm"))
            .map(|it| {
                it.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("l-") && n.ends_with(&format!("-{port}")))
                    .collect()
            })
            .unwrap_or_default()
    };
    let ch = channel();
    let id = create_id(ch);
    let mut a = c_addr(&format!("127.0.0.1:{port}"));
    // SAFETY: the id and a valid address.
    assert_eq!(unsafe { rdma_bind_addr(id, sa(&mut a)) }, 0);
    assert_eq!(names(), Vec::<String>::new(), "bound, not listening");
    let (cch, cid) = routed(port);
    let p = param(&[]);
    // SAFETY: a routed id and valid parameters.
    assert_eq!(unsafe { rdma_connect(cid, &p as *const _ as *mut _) }, 0);
    assert_eq!(expect(cch, event::REJECTED).status, 8);
    destroy(cid);
    close(cch);
    // SAFETY: the bound id.
    assert_eq!(unsafe { rdma_listen(id, 8) }, 0);
    assert_eq!(names().len(), 1, "listening");
    destroy(id);
    close(ch);
    assert_eq!(names(), Vec::<String>::new(), "destroyed");
}

#[test]
fn reject_carries_reason_28_and_its_private_data_within_the_limits() {
    let port = port();
    let (lch, lid) = listener(port);
    let (ch, id) = routed(port);
    let too_long = [1u8; wire::REQ_PRIVATE + 1];
    let p = param(&too_long);
    // SAFETY: a routed id and parameters with 57 bytes of private data.
    assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, -1);
    assert_eq!(errno(), libc::EINVAL);
    let req: Vec<u8> = (0..wire::REQ_PRIVATE as u8).collect();
    let p = param(&req);
    // SAFETY: as above, 56 bytes.
    assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, 0);
    let r = expect(lch, event::CONNECT_REQUEST);
    assert_eq!(r.listen_id, lid);
    assert_eq!(r.private, req);
    let child = r.id;
    let rej: Vec<u8> = (0..wire::REJ_PRIVATE).map(|i| (i * 3) as u8).collect();
    let long = [0u8; wire::REJ_PRIVATE + 1];
    // SAFETY: the new id and 149 bytes.
    assert_eq!(
        unsafe { rdma_reject(child, long.as_ptr().cast(), long.len() as u8) },
        -1
    );
    assert_eq!(errno(), libc::EINVAL);
    // SAFETY: the new id and 148 bytes.
    assert_eq!(
        unsafe { rdma_reject(child, rej.as_ptr().cast(), rej.len() as u8) },
        0
    );
    let e = expect(ch, event::REJECTED);
    assert_eq!(e.status, 28);
    assert_eq!(e.private, rej);
    destroy(child);
    destroy(id);
    destroy(lid);
    close(ch);
    close(lch);
}

#[test]
fn accept_with_196_bytes_connects_both_qps_and_a_disconnect_reaches_both_sides() {
    let port = port();
    let (lch, lid) = listener(port);
    let (ch, id) = routed(port);
    qp(id);
    let p = param(b"hello");
    // SAFETY: a routed id with a QP; valid parameters.
    assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, 0);
    let r = expect(lch, event::CONNECT_REQUEST);
    assert_eq!(r.private, b"hello");
    let child = r.id;
    qp(child);
    let rep: Vec<u8> = (0..wire::REP_PRIVATE).map(|i| i as u8).collect();
    let too_long = [0u8; wire::REP_PRIVATE + 1];
    let bad = param(&too_long);
    // SAFETY: the new id; 197 bytes.
    assert_eq!(
        unsafe { rdma_accept(child, &bad as *const _ as *mut _) },
        -1
    );
    let a = param(&rep);
    // SAFETY: the new id; 196 bytes.
    assert_eq!(unsafe { rdma_accept(child, &a as *const _ as *mut _) }, 0);
    let e = expect(ch, event::ESTABLISHED);
    assert_eq!(e.private, rep);
    expect(lch, event::ESTABLISHED);
    // SAFETY: both ids have QPs, moved by the library.
    unsafe {
        assert_eq!((*(*id).qp).state, IBV_QPS_RTS);
        assert_eq!((*(*child).qp).state, IBV_QPS_RTS);
    }
    // SAFETY: the connected id.
    assert_eq!(unsafe { rdma_disconnect(id) }, 0);
    expect(ch, event::DISCONNECTED);
    expect(lch, event::DISCONNECTED);
    // Then each side leaves its time-wait.
    assert_eq!(expect(ch, event::TIMEWAIT_EXIT).id, id);
    assert_eq!(expect(lch, event::TIMEWAIT_EXIT).id, child);
    // SAFETY: the other side, disconnected by its peer.
    assert_eq!(unsafe { rdma_disconnect(child) }, 0);
    // SAFETY: ids of the test's, not used again.
    unsafe {
        rdma_destroy_qp(id);
        rdma_destroy_qp(child);
    }
    destroy(child);
    destroy(id);
    destroy(lid);
    close(ch);
    close(lch);
}

#[test]
fn malformed_and_forged_messages_are_dropped() {
    let port = port();
    let (lch, lid) = listener(port);
    let sock = UnixDatagram::unbound().unwrap();
    let lpath = dir()
        .join("rdmacm")
        .join(format!("l-106-4-7f000001-{port}"));
    assert!(lpath.exists(), "{}", lpath.display());
    let conn = wire::Conn {
        qpn: 1,
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
    };
    let req = wire::Message {
        kind: wire::Kind::Req,
        from: 99,
        to: 0,
        name: wire::Name::new("nobody-here").unwrap(),
        body: wire::Body::Req {
            ps: 0x106,
            conn,
            src: "127.0.0.1:1".parse().unwrap(),
            dst: format!("127.0.0.1:{port}").parse().unwrap(),
            private: wire::Private::EMPTY,
        },
    };
    let mut good = [0u8; wire::MAX_MESSAGE];
    let n = wire::encode(&req, &mut good);
    let mut junk: Vec<Vec<u8>> = vec![
        vec![],
        b"VQCM".to_vec(),
        vec![0xff; wire::MAX_MESSAGE + 64],
        good[..n - 1].to_vec(),
    ];
    let mut v2 = good[..n].to_vec();
    v2[4] = 2;
    junk.push(v2);
    let mut long_private = good[..n].to_vec();
    long_private[n - 1] = (wire::REQ_PRIVATE + 1) as u8;
    junk.push(long_private);
    // A REP at a listener, and an RTU for an id that does not exist.
    let rep = wire::Message {
        kind: wire::Kind::Rep,
        body: wire::Body::Rep {
            conn,
            status: 0,
            private: wire::Private::EMPTY,
        },
        ..req
    };
    let mut buf = [0u8; wire::MAX_MESSAGE];
    let m = wire::encode(&rep, &mut buf);
    junk.push(buf[..m].to_vec());
    for j in &junk {
        let _ = sock.send_to(j, &lpath);
    }
    let rtu = wire::Message {
        kind: wire::Kind::Rtu,
        to: 0x7fff_fff0,
        body: wire::Body::Empty,
        ..req
    };
    let m = wire::encode(&rtu, &mut buf);
    for e in std::fs::read_dir(dir().join("rdmacm")).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with('p') {
            let _ = sock.send_to(&buf[..m], e.path());
        }
    }
    assert!(next(lch, 500).is_none(), "no event from junk");
    // The listener still serves a real request.
    let (ch, id) = routed(port);
    let p = param(&[]);
    // SAFETY: a routed id.
    assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, 0);
    let r = expect(lch, event::CONNECT_REQUEST);
    // SAFETY: the new id.
    assert_eq!(unsafe { rdma_reject(r.id, ptr::null::<c_void>(), 0) }, 0);
    assert_eq!(expect(ch, event::REJECTED).status, 28);
    destroy(r.id);
    destroy(id);
    destroy(lid);
    close(ch);
    close(lch);
}

#[test]
fn a_listener_that_never_answers_makes_connect_unreachable_after_the_timeout() {
    setup();
    let port = port();
    let rd = dir().join("rdmacm");
    let _ = std::fs::create_dir_all(&rd);
    let path = rd.join(format!("l-106-4-7f000001-{port}"));
    let (ch, id) = routed(port);
    // A peer that receives and never answers.
    let _silent = UnixDatagram::bind(&path).unwrap();
    let p = param(&[]);
    let start = Instant::now();
    // SAFETY: a routed id.
    assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, 0);
    assert!(next(ch, (CM_TIMEOUT.as_millis() / 2) as i32).is_none());
    let e = expect(ch, event::UNREACHABLE);
    assert_eq!(e.status, -libc::ETIMEDOUT);
    assert!(start.elapsed() >= CM_TIMEOUT, "{:?}", start.elapsed());
    destroy(id);
    close(ch);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn an_address_of_no_local_interface_fails_after_the_callers_timeout() {
    let ch = channel();
    let id = create_id(ch);
    let mut dst = c_addr("192.0.2.1:7174");
    let start = Instant::now();
    // SAFETY: the id and a valid address.
    assert_eq!(
        unsafe { rdma_resolve_addr(id, ptr::null_mut(), sa(&mut dst), 300) },
        0
    );
    let e = expect(ch, event::ADDR_ERROR);
    assert_eq!(e.status, -libc::ETIMEDOUT);
    assert!(start.elapsed() >= Duration::from_millis(300));
    // SAFETY: an unresolved id may not ask for a route.
    assert_eq!(unsafe { rdma_resolve_route(id, 100) }, -1);
    destroy(id);
    close(ch);
}

#[test]
fn a_listener_whose_process_is_gone_makes_connect_unreachable_before_the_timeout() {
    setup();
    let port = port();
    let rd = dir().join("rdmacm");
    let _ = std::fs::create_dir_all(&rd);
    let path = rd.join(format!("l-106-4-7f000001-{port}"));
    let (ch, id) = routed(port);
    let listener = UnixDatagram::bind(&path).unwrap();
    let p = param(&[]);
    let start = Instant::now();
    // SAFETY: a routed id.
    assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, 0);
    // The REQ was taken; then its process goes (the socket's file stays, refused).
    let mut buf = [0u8; wire::MAX_MESSAGE];
    assert!(listener.recv(&mut buf).unwrap() > 0);
    drop(listener);
    let e = expect(ch, event::UNREACHABLE);
    assert_eq!(e.status, -libc::ETIMEDOUT);
    assert!(start.elapsed() < CM_TIMEOUT / 2, "{:?}", start.elapsed());
    destroy(id);
    close(ch);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn an_ipv6_wildcard_listener_takes_ipv4_requests_unless_afonly() {
    for afonly in [0i32, 1] {
        let port = port();
        let lch = channel();
        let lid = create_id(lch);
        // SAFETY: the id and a 4-byte int option.
        assert_eq!(
            unsafe {
                rdma_set_option(
                    lid,
                    abi::RDMA_OPTION_ID,
                    abi::RDMA_OPTION_ID_AFONLY,
                    (&afonly as *const i32).cast_mut().cast(),
                    4,
                )
            },
            0
        );
        let mut a = c_addr(&format!("[::]:{port}"));
        // SAFETY: the id and a valid address.
        assert_eq!(
            unsafe { rdma_bind_addr(lid, sa(&mut a)) },
            0,
            "errno {}",
            errno()
        );
        // SAFETY: the bound id.
        assert_eq!(unsafe { rdma_listen(lid, 1) }, 0);
        let (ch, id) = routed(port);
        let p = param(&[]);
        // SAFETY: a routed id.
        assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, 0);
        if afonly == 1 {
            assert_eq!(expect(ch, event::REJECTED).status, 8);
        } else {
            let r = expect(lch, event::CONNECT_REQUEST);
            // SAFETY: the new id.
            assert_eq!(unsafe { rdma_reject(r.id, ptr::null(), 0) }, 0);
            assert_eq!(expect(ch, event::REJECTED).status, 28);
            destroy(r.id);
        }
        destroy(id);
        destroy(lid);
        close(ch);
        close(lch);
    }
}

#[test]
fn bad_calls_fail_with_einval_and_touch_nothing() {
    setup();
    let null_id: *mut rdma_cm_id = ptr::null_mut();
    let mut out = ptr::null_mut();
    // SAFETY: every call is given null or an id in the wrong state; none may crash.
    unsafe {
        assert_eq!(
            rdma_create_id(
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                abi::RDMA_PS_TCP
            ),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rdma_get_cm_event(ptr::null_mut(), &mut out), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rdma_ack_cm_event(ptr::null_mut()), -1);
        assert_eq!(rdma_destroy_id(null_id), -1);
        assert_eq!(rdma_connect(null_id, ptr::null_mut()), -1);
        assert_eq!(rdma_listen(null_id, 1), -1);
        assert_eq!(errno(), libc::EINVAL);
    }
    // An id destroyed already, and a pointer that was never an id: EINVAL, no crash
    // (a program retrying a connection may reuse a stale pointer).
    let ch = channel();
    let gone = create_id(ch);
    destroy(gone);
    let mut bogus = [0u64; 64];
    let mut dst = c_addr("127.0.0.1:9");
    for idp in [gone, bogus.as_mut_ptr().cast::<rdma_cm_id>()] {
        // SAFETY: the library must refuse both without touching them.
        unsafe {
            assert_eq!(
                rdma_resolve_addr(idp, ptr::null_mut(), sa(&mut dst), 100),
                -1
            );
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(rdma_destroy_id(idp), -1);
            assert_eq!(errno(), libc::EINVAL);
        }
    }
    close(ch);
    // A channel destroyed already, and one that never was: waiting on it, making an
    // id on it and destroying it again fail cleanly (rping's CM thread waits on its
    // channel again after its main thread destroyed it; perftest 4.5's retry path
    // destroys its channel twice).
    let gone = channel();
    close(gone);
    let mut bogus = [0u64; 64];
    for ch in [gone, bogus.as_mut_ptr().cast::<abi::rdma_event_channel>()] {
        let mut id = ptr::null_mut();
        // SAFETY: the library must refuse both without touching them.
        unsafe {
            assert_eq!(rdma_get_cm_event(ch, &mut out), -1);
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(
                rdma_create_id(ch, &mut id, ptr::null_mut(), abi::RDMA_PS_TCP),
                -1
            );
            assert_eq!(errno(), libc::EINVAL);
            rdma_destroy_event_channel(ch);
        }
    }
    assert_eq!(
        bogus, [0; 64],
        "nothing written to what was never a channel"
    );
    let ch = channel();
    let mut id = ptr::null_mut();
    // SAFETY: a live channel; an unknown port space.
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut id, ptr::null_mut(), 0x999) },
        -1
    );
    assert_eq!(errno(), libc::EINVAL);
    let id = create_id(ch);
    let p = param(&[]);
    // SAFETY: an id with nothing resolved: connect, listen, accept, disconnect, a
    // route, a QP and an IPv4 address of another family are all refused.
    unsafe {
        assert_eq!(rdma_connect(id, &p as *const _ as *mut _), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rdma_listen(id, 1), -1);
        assert_eq!(rdma_accept(id, ptr::null_mut()), -1);
        assert_eq!(rdma_disconnect(id), -1);
        assert_eq!(rdma_resolve_route(id, 100), -1);
        let mut a: ibv_qp_init_attr = core::mem::zeroed();
        assert_eq!(rdma_create_qp(id, ptr::null_mut(), &mut a), -1);
        assert_eq!(errno(), libc::EINVAL);
        let mut un: libc::sockaddr_storage = core::mem::zeroed();
        un.ss_family = libc::AF_UNIX as libc::sa_family_t;
        assert_eq!(rdma_bind_addr(id, sa(&mut un)), -1);
        assert_eq!(errno(), libc::EAFNOSUPPORT);
        let mut far = c_addr("192.0.2.9:1");
        assert_eq!(rdma_bind_addr(id, sa(&mut far)), -1);
        assert_eq!(errno(), libc::EADDRNOTAVAIL);
    }
    destroy(id);
    close(ch);
}

/// `rdma_create_ep` of `node:port` with `hints`' port space and QP type (passive when
/// `node` is `None`), with a QP of one send and one receive for an active id.
fn ep(node: Option<&str>, port: u16, ps: u32, qp_type: u32) -> *mut rdma_cm_id {
    setup();
    // SAFETY: all-zero is a valid rdma_addrinfo (null pointers, zero lengths).
    let mut hints: abi::rdma_addrinfo = unsafe { core::mem::zeroed() };
    hints.ai_flags = if node.is_none() { abi::RAI_PASSIVE } else { 0 };
    hints.ai_port_space = ps as i32;
    hints.ai_qp_type = qp_type as i32;
    let node = node.map(|n| std::ffi::CString::new(n).unwrap());
    let service = std::ffi::CString::new(port.to_string()).unwrap();
    let mut res = ptr::null_mut();
    // SAFETY: NUL-terminated strings, valid hints, an out-pointer.
    let rc = unsafe {
        rdma_getaddrinfo(
            node.as_ref().map_or(ptr::null(), |n| n.as_ptr()),
            service.as_ptr(),
            &hints,
            &mut res,
        )
    };
    assert_eq!(rc, 0, "errno {}", errno());
    // SAFETY: all-zero is a valid ibv_qp_init_attr.
    let mut attr: ibv_qp_init_attr = unsafe { core::mem::zeroed() };
    attr.cap.max_send_wr = 1;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_wr = 1;
    attr.cap.max_recv_sge = 1;
    let mut id = ptr::null_mut();
    // SAFETY: the addrinfo just made; valid attributes.
    let rc = unsafe { rdma_create_ep(&mut id, res, ptr::null_mut(), &mut attr) };
    // SAFETY: the addrinfo just made, freed once.
    unsafe { rdma_freeaddrinfo(res) };
    assert_eq!(rc, 0, "errno {}", errno());
    id
}

/// XRC's halves pair only with each other: `rdma_create_ep` makes an XRC send QP for an
/// `IBV_QPT_XRC_SEND` address, and an RC request to an XRC listener, or an XRC request
/// to an RC listener, is REJECTED with reason 9 (invalid transport type).
#[test]
fn xrc_and_rc_requests_are_refused_by_each_others_listeners() {
    use vqp_sys::{IBV_QPT_RC, IBV_QPT_XRC_RECV, IBV_QPT_XRC_SEND};
    // An XRC listener; an RC id of its port space asks it.
    let xport = port();
    let xl = ep(None, xport, abi::RDMA_PS_IB, IBV_QPT_XRC_RECV);
    // SAFETY: the passive id just made.
    assert_eq!(unsafe { rdma_listen(xl, 4) }, 0);
    let ch = channel();
    let mut id = ptr::null_mut();
    // SAFETY: a live channel, an out-pointer.
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut id, ptr::null_mut(), abi::RDMA_PS_IB) },
        0
    );
    let mut dst = c_addr(&format!("127.0.0.1:{xport}"));
    // SAFETY: the id and a valid address.
    assert_eq!(
        unsafe { rdma_resolve_addr(id, ptr::null_mut(), sa(&mut dst), 2000) },
        0
    );
    expect(ch, event::ADDR_RESOLVED);
    // SAFETY: the id, its address resolved.
    assert_eq!(unsafe { rdma_resolve_route(id, 2000) }, 0);
    expect(ch, event::ROUTE_RESOLVED);
    qp(id);
    // SAFETY: the id's QP, as the library made it.
    assert_eq!(unsafe { (*(*id).qp).qp_type }, IBV_QPT_RC);
    // SAFETY: a routed id with a QP.
    assert_eq!(unsafe { rdma_connect(id, ptr::null_mut()) }, 0);
    let e = expect(ch, event::REJECTED);
    assert_eq!(e.status, 9, "{e:?}");
    destroy(id);
    close(ch);
    // SAFETY: the passive id, not used again.
    unsafe { rdma_destroy_ep(xl) };

    // An RC listener; an XRC send id asks it (synchronously: the connect fails with
    // ECONNREFUSED, its REJECTED event, reason 9, kept on the id).
    let rport = port();
    let rl = ep(None, rport, abi::RDMA_PS_IB, IBV_QPT_RC);
    // SAFETY: the passive id just made.
    assert_eq!(unsafe { rdma_listen(rl, 4) }, 0);
    let xs = ep(Some("127.0.0.1"), rport, abi::RDMA_PS_IB, IBV_QPT_XRC_SEND);
    // SAFETY: the active id just made, with its QP.
    assert_eq!(unsafe { (*(*xs).qp).qp_type }, IBV_QPT_XRC_SEND);
    // SAFETY: as above.
    assert_eq!(unsafe { rdma_connect(xs, ptr::null_mut()) }, -1);
    assert_eq!(errno(), libc::ECONNREFUSED);
    // SAFETY: the synchronous id's kept event.
    let (kind, status) = unsafe { ((*(*xs).event).event, (*(*xs).event).status) };
    assert_eq!((kind, status), (event::REJECTED, 9));
    // SAFETY: the test's ids, not used again.
    unsafe {
        rdma_destroy_ep(xs);
        rdma_destroy_ep(rl);
    }
}
