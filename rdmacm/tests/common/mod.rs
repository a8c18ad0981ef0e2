//! Helpers of the behaviour and hostile-peer tests: one process, the library linked
//! in, softverbs' cdylib as libibverbs, a rendezvous directory of the test's own.
#![allow(dead_code, unused_imports)]

use core::ffi::c_void;
use core::ptr;
use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::Once;
use std::time::{Duration, Instant};

use vqp_rdmacm::abi::{self, event, rdma_cm_id, rdma_conn_param, rdma_event_channel};
use vqp_rdmacm::capi::*;
use vqp_rdmacm::wire;
use vqp_sys::{ibv_qp_init_attr, IBV_QPS_RTS, IBV_QPT_RC};

/// The CM timeout the tests run with (`VQP_RDMACM_TIMEOUT_MS`).
pub const CM_TIMEOUT: Duration = Duration::from_millis(3000);

/// The rendezvous directory's parent, one per test process (listener sockets are
/// named by port, and another process may be given the same port by the kernel).
pub fn dir() -> PathBuf {
    std::env::temp_dir().join(format!("{PREFIX}{}", std::process::id()))
}

pub const PREFIX: &str = "vqp-rdmacm-behaviour-";

/// Removes the directories of earlier runs whose process is gone.
pub fn sweep() {
    let Ok(it) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in it.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !std::path::Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Removes this process's [`dir`] when it exits (the tests share it).
extern "C" fn remove_dir() {
    let _ = std::fs::remove_dir_all(dir());
}

pub fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        sweep();
        // SAFETY: registers a function that takes nothing and returns.
        unsafe { libc::atexit(remove_dir) };
        let lib = vqp_softverbs::find_cdylib().expect("softverbs' cdylib is built");
        std::env::set_var("VQP_IBVERBS_PATH", lib);
        std::env::set_var("VQP_SOFT_DIR", dir());
        std::env::set_var("VQP_RDMACM_TIMEOUT_MS", CM_TIMEOUT.as_millis().to_string());
    });
}

/// A port for one test: the kernel's pick for a TCP listener, closed at once.
pub fn port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

pub fn c_addr(s: &str) -> libc::sockaddr_storage {
    let a: SocketAddr = s.parse().unwrap();
    vqp_rdmacm::addr::to_storage(&a)
}

pub fn sa(st: &mut libc::sockaddr_storage) -> *mut libc::sockaddr {
    (st as *mut libc::sockaddr_storage).cast()
}

/// An event, copied out (and acknowledged).
#[derive(Debug)]
pub struct Ev {
    pub event: u32,
    pub status: i32,
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub private: Vec<u8>,
}

/// Whether the channel's descriptor is readable within `ms`.
pub fn readable(ch: *mut rdma_event_channel, ms: i32) -> bool {
    // SAFETY: the channel is live.
    let mut p = libc::pollfd {
        fd: unsafe { (*ch).fd },
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

/// The channel's next event within `ms`.
pub fn next(ch: *mut rdma_event_channel, ms: i32) -> Option<Ev> {
    if !readable(ch, ms) {
        return None;
    }
    let mut e = ptr::null_mut();
    // SAFETY: a live channel and an out-pointer.
    assert_eq!(
        unsafe { rdma_get_cm_event(ch, &mut e) },
        0,
        "errno {}",
        errno()
    );
    // SAFETY: the event just taken.
    let ev = unsafe { &*e };
    let (pd, n) = if ev.event == event::REJECTED
        || ev.event == event::CONNECT_REQUEST
        || ev.event == event::ESTABLISHED
    {
        // SAFETY: a connection event's parameters are `conn`.
        let c = unsafe { ev.param.conn };
        (c.private_data, usize::from(c.private_data_len))
    } else {
        (ptr::null(), 0)
    };
    let private = if n == 0 {
        Vec::new()
    } else {
        // SAFETY: the event's private data, `n` bytes, alive until the ack.
        unsafe { core::slice::from_raw_parts(pd.cast::<u8>(), n) }.to_vec()
    };
    let out = Ev {
        event: ev.event,
        status: ev.status,
        id: ev.id,
        listen_id: ev.listen_id,
        private,
    };
    // SAFETY: acknowledged once.
    assert_eq!(unsafe { rdma_ack_cm_event(e) }, 0);
    Some(out)
}

pub fn expect(ch: *mut rdma_event_channel, want: u32) -> Ev {
    let e = next(ch, 5000).unwrap_or_else(|| panic!("no event {want} within 5 s"));
    assert_eq!(e.event, want, "{e:?}");
    e
}

pub fn channel() -> *mut rdma_event_channel {
    setup();
    let ch = rdma_create_event_channel();
    assert!(!ch.is_null(), "errno {}", errno());
    ch
}

pub fn create_id(ch: *mut rdma_event_channel) -> *mut rdma_cm_id {
    let mut id = ptr::null_mut();
    // SAFETY: a live channel, an out-pointer.
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut id, ptr::null_mut(), abi::RDMA_PS_TCP) },
        0,
        "errno {}",
        errno()
    );
    id
}

pub fn listener(port: u16) -> (*mut rdma_event_channel, *mut rdma_cm_id) {
    let ch = channel();
    let id = create_id(ch);
    let mut a = c_addr(&format!("127.0.0.1:{port}"));
    // SAFETY: the id and a valid address.
    assert_eq!(
        unsafe { rdma_bind_addr(id, sa(&mut a)) },
        0,
        "errno {}",
        errno()
    );
    // SAFETY: the bound id.
    assert_eq!(unsafe { rdma_listen(id, 8) }, 0);
    (ch, id)
}

/// An id with its route to 127.0.0.1:`port` resolved.
pub fn routed(port: u16) -> (*mut rdma_event_channel, *mut rdma_cm_id) {
    let ch = channel();
    let id = create_id(ch);
    let mut dst = c_addr(&format!("127.0.0.1:{port}"));
    // SAFETY: the id and a valid address.
    assert_eq!(
        unsafe { rdma_resolve_addr(id, ptr::null_mut(), sa(&mut dst), 2000) },
        0
    );
    expect(ch, event::ADDR_RESOLVED);
    // SAFETY: the id, its address resolved.
    assert_eq!(unsafe { rdma_resolve_route(id, 2000) }, 0);
    expect(ch, event::ROUTE_RESOLVED);
    (ch, id)
}

pub fn param(private: &[u8]) -> rdma_conn_param {
    rdma_conn_param {
        private_data: private.as_ptr().cast(),
        private_data_len: private.len() as u8,
        responder_resources: 4,
        initiator_depth: 4,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: 0,
    }
}

pub fn close(ch: *mut rdma_event_channel) {
    // SAFETY: a channel of the test's whose ids are destroyed, not used again.
    unsafe { rdma_destroy_event_channel(ch) };
}

pub fn destroy(id: *mut rdma_cm_id) {
    // SAFETY: an id of the test's, not used again.
    assert_eq!(unsafe { rdma_destroy_id(id) }, 0);
}

/// Gives `id` an RC QP of four sends and receives.
pub fn qp(id: *mut rdma_cm_id) {
    // SAFETY: all-zero is a valid ibv_qp_init_attr; CQs are made by the library.
    let mut a: ibv_qp_init_attr = unsafe { core::mem::zeroed() };
    a.cap.max_send_wr = 4;
    a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a.qp_type = IBV_QPT_RC;
    // SAFETY: an id with a device; valid attributes.
    assert_eq!(
        unsafe { rdma_create_qp(id, ptr::null_mut(), &mut a) },
        0,
        "errno {}",
        errno()
    );
}
