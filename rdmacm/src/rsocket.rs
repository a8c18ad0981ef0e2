//! rsockets: stream sockets over an RC QP, connected through this library's CM —
//! `rsocket(AF_INET|AF_INET6, SOCK_STREAM)`, `rbind`, `rlisten`, `raccept`, `rconnect`,
//! `rsend`/`rrecv` (and `rread`, `rwrite`, the vector and `msg` forms), `rpoll`,
//! `rfcntl` (`O_NONBLOCK`), `rshutdown`, `rclose`, the socket options a program sets
//! (accepted) and reads (`SO_ERROR`), `rgetpeername`/`rgetsockname`.
//!
//! The wire is our own, between two processes that both use this library (rdma-core's
//! rsocket protocol, with its credits and RDMA WRITE ring, is not spoken): every send
//! is one RDMA SEND of up to [`CHUNK`] bytes from a registered bounce buffer; each side
//! keeps [`DEPTH`] receives of [`CHUNK`] bytes posted, and the QP's RNR retry count 7
//! (retry forever) makes a sender wait while the receiver's buffers are all full, so no
//! byte is lost and no credit scheme is needed. A zero-byte SEND is the end of the
//! stream (`rshutdown(SHUT_WR)`, `rclose`). A socket number is the descriptor of the
//! cm id's own event channel, unique while the socket lives, as in rdma-core.
//!
//! `riomap` registers a region and announces it to the peer in a control message (a
//! SEND with an immediate, which the receiving side takes out of the stream);
//! `riowrite` RDMA WRITEs into an announced region through the bounce buffer.
//!
//! Not here: `rselect`, `repoll_*` (`ENOSYS`), datagram rsockets (`SOCK_DGRAM`:
//! `ENOTSUP`).

use core::ffi::c_int;
use core::ptr;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vqp_sys::*;

use crate::abi::{rdma_cm_id, rdma_conn_param, RDMA_PS_TCP};
use crate::addr;
use crate::id::{self, Id};
use crate::verbs;

/// Bytes per SEND and per posted receive.
pub const CHUNK: usize = 64 * 1024;
/// Receives each side keeps posted.
pub const DEPTH: usize = 16;

/// The immediate of a control message announcing an `riomap`ped region; its payload
/// is the region's offset, address and length (u64 each) and rkey (u32), little-endian.
const IOMAP: u32 = 1;
const IOMAP_LEN: usize = 28;
/// The most regions a peer may announce.
const MAX_MAPS: usize = 64;

/// Where a socket is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Created,
    Listening,
    Connected,
    Closed,
}

/// One rsocket.
struct Sock {
    id: *mut Id,
    state: State,
    nonblock: bool,
    /// The registered receive buffers (DEPTH × CHUNK) and send buffer (CHUNK).
    bufs: Vec<u8>,
    mr: *mut ibv_mr,
    /// A completed receive being read: (buffer index, next byte, end).
    current: Option<(usize, usize, usize)>,
    /// The peer ended its stream (or the connection broke).
    eof: bool,
    /// A send not yet completed.
    sending: bool,
    /// This side's `riomap`ped regions: (offset, start, length, MR).
    local_maps: Vec<(u64, usize, usize, *mut ibv_mr)>,
    /// The peer's, as its announcements said: (offset, address, length, rkey).
    peer_maps: Vec<(u64, u64, u64, u32)>,
}

// SAFETY: the pointers are libibverbs and cm objects, usable from any thread; each
// socket is used under its mutex.
unsafe impl Send for Sock {}

type Table = HashMap<c_int, Arc<Mutex<Sock>>>;

static SOCKS: Mutex<Option<Table>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<Table>> {
    SOCKS.lock().unwrap_or_else(|e| e.into_inner())
}

fn get(fd: c_int) -> Result<Arc<Mutex<Sock>>, i32> {
    table()
        .as_ref()
        .and_then(|t| t.get(&fd).cloned())
        .ok_or(libc::EBADF)
}

fn lock(s: &Mutex<Sock>) -> MutexGuard<'_, Sock> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

fn number(id: *mut Id) -> c_int {
    // SAFETY: a live synchronous id; its channel is its own.
    unsafe { (*(*id).c.channel).fd }
}

fn insert(id: *mut Id, state: State) -> c_int {
    let fd = number(id);
    let s = Sock {
        id,
        state,
        nonblock: false,
        bufs: Vec::new(),
        mr: ptr::null_mut(),
        current: None,
        eof: false,
        sending: false,
        local_maps: Vec::new(),
        peer_maps: Vec::new(),
    };
    table()
        .get_or_insert_with(HashMap::new)
        .insert(fd, Arc::new(Mutex::new(s)));
    fd
}

/// `rsocket`.
pub fn socket(domain: c_int, kind: c_int, _protocol: c_int) -> Result<c_int, i32> {
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(libc::EAFNOSUPPORT);
    }
    if kind & 0xf != libc::SOCK_STREAM {
        return Err(libc::ENOTSUP);
    }
    // SAFETY: a synchronous id (no channel given).
    let id = unsafe { id::create_id(ptr::null_mut(), ptr::null_mut(), RDMA_PS_TCP) }?;
    let fd = insert(id, State::Created);
    if kind & libc::SOCK_NONBLOCK != 0 {
        lock(&*get(fd)?).nonblock = true;
    }
    Ok(fd)
}

/// `rbind`.
///
/// # Safety
/// `sa` is a socket address of its family's length.
pub unsafe fn bind(fd: c_int, sa: *const libc::sockaddr) -> Result<(), i32> {
    let s = get(fd)?;
    let idp = lock(&s).id;
    // SAFETY: the socket's live id; the caller's address.
    unsafe { id::bind_addr(&mut *idp, sa) }
}

/// `rlisten`.
pub fn listen(fd: c_int, backlog: c_int) -> Result<(), i32> {
    let s = get(fd)?;
    let mut s = lock(&s);
    // SAFETY: the socket's live id.
    id::listen(unsafe { &mut *s.id }, backlog)?;
    s.state = State::Listening;
    Ok(())
}

/// The QP, buffers and posted receives of a socket whose id has its device.
fn prepare(s: &mut Sock) -> Result<(), i32> {
    // SAFETY: the socket's live id.
    let idr = unsafe { &mut *s.id };
    // SAFETY: all-zero is a valid ibv_qp_init_attr; the library makes the CQs.
    let mut a: ibv_qp_init_attr = unsafe { core::mem::zeroed() };
    a.cap.max_send_wr = 4;
    a.cap.max_recv_wr = DEPTH as u32;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a.qp_type = IBV_QPT_RC;
    // SAFETY: the id has a device; valid attributes.
    unsafe { id::create_qp(idr, ptr::null_mut(), &mut a) }?;
    let t = verbs::table()?;
    s.bufs = vec![0u8; (DEPTH + 1) * CHUNK];
    // SAFETY: the id's PD; the buffer lives as long as the socket (freed after the MR).
    s.mr = unsafe {
        (t.reg_mr)(
            idr.c.pd,
            s.bufs.as_mut_ptr().cast(),
            s.bufs.len(),
            IBV_ACCESS_LOCAL_WRITE as c_int,
        )
    };
    if s.mr.is_null() {
        return Err(libc::ENOMEM);
    }
    for i in 0..DEPTH {
        post_recv(s, i)?;
    }
    Ok(())
}

fn post_recv(s: &mut Sock, i: usize) -> Result<(), i32> {
    // SAFETY: the socket's live id, QP and MR.
    let (qp, lkey) = unsafe { ((*s.id).c.qp, (*s.mr).lkey) };
    let mut sge = ibv_sge {
        addr: s.bufs[i * CHUNK..].as_ptr() as u64,
        length: CHUNK as u32,
        lkey,
    };
    let mut wr = ibv_recv_wr {
        wr_id: i as u64,
        next: ptr::null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad = ptr::null_mut();
    // SAFETY: the QP's context's ops; a valid one-entry request within the MR.
    let rc = unsafe {
        let post = (*(*qp).context).ops.post_recv.ok_or(libc::ENOSYS)?;
        post(qp, &mut wr, &mut bad)
    };
    if rc != 0 {
        return Err(rc);
    }
    Ok(())
}

fn conn_param() -> rdma_conn_param {
    rdma_conn_param {
        private_data: ptr::null(),
        private_data_len: 0,
        responder_resources: 0,
        initiator_depth: 0,
        flow_control: 1,
        retry_count: 7,
        // Retry forever: a full receiver makes the sender wait, never fail.
        rnr_retry_count: 7,
        srq: 0,
        qp_num: 0,
    }
}

/// `rconnect`: resolves, connects, and waits for the connection (a non-blocking socket
/// too: the exchange between local processes is short).
///
/// # Safety
/// `sa` is a socket address of its family's length.
pub unsafe fn connect(fd: c_int, sa: *const libc::sockaddr) -> Result<(), i32> {
    let s = get(fd)?;
    let mut s = lock(&s);
    if s.state != State::Created {
        return Err(libc::EISCONN);
    }
    // SAFETY: the socket's live id; the caller's address.
    let idr = unsafe { &mut *s.id };
    // SAFETY: as above.
    unsafe { id::resolve_addr(idr, ptr::null(), sa, 2000) }?;
    id::resolve_route(idr, 2000)?;
    prepare(&mut s)?;
    let p = conn_param();
    // SAFETY: the socket's live id; valid parameters.
    unsafe { id::connect(&mut *s.id, &p) }?;
    s.state = State::Connected;
    Ok(())
}

/// `raccept`: the next connection request, accepted; its socket number.
///
/// # Safety
/// `sa` and `len` are null or the caller's address buffer and its length.
pub unsafe fn accept(
    fd: c_int,
    sa: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> Result<c_int, i32> {
    let l = get(fd)?;
    let new = {
        let (state, lid, nonblock) = {
            let l = lock(&l);
            (l.state, l.id, l.nonblock)
        };
        if state != State::Listening {
            return Err(libc::EINVAL);
        }
        if nonblock && !request_waiting(lid) {
            return Err(libc::EAGAIN);
        }
        // SAFETY: the listener's live id (the listener's lock is not held while the
        // call waits, so that rpoll and others see the other sockets meanwhile).
        id::get_request(unsafe { &mut *lid })?
    };
    let idp = new.cast::<Id>();
    let nfd = insert(idp, State::Created);
    let s = get(nfd)?;
    let mut s = lock(&s);
    let done = prepare(&mut s).and_then(|()| {
        let p = conn_param();
        // SAFETY: the new id; valid parameters.
        unsafe { id::accept(&mut *idp, &p) }
    });
    if let Err(e) = done {
        drop(s);
        let _ = close(nfd);
        return Err(e);
    }
    s.state = State::Connected;
    // SAFETY: the new id; the caller's buffer.
    unsafe { write_addr(&(*idp).c.route.addr.dst, sa, len) };
    Ok(nfd)
}

/// Copies `st` into the caller's buffer, truncated to its length, as accept(2) does.
///
/// # Safety
/// `sa` and `len` are null or a buffer of `*len` bytes and its length.
unsafe fn write_addr(
    st: &libc::sockaddr_storage,
    sa: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) {
    if sa.is_null() || len.is_null() {
        return;
    }
    // SAFETY: the storage holds an address this library wrote.
    let Ok(a) = (unsafe { addr::from_c((st as *const libc::sockaddr_storage).cast()) }) else {
        return;
    };
    let full = addr::c_len(&a);
    // SAFETY: the caller's length.
    let room = unsafe { *len };
    let n = full.min(room) as usize;
    // SAFETY: `n` bytes fit in both.
    unsafe {
        ptr::copy_nonoverlapping(
            (st as *const libc::sockaddr_storage).cast::<u8>(),
            sa.cast::<u8>(),
            n,
        );
        *len = full;
    }
}

/// Polls the socket's CQs once: finishes the send in flight, takes one receive.
fn progress(s: &mut Sock) -> Result<(), i32> {
    // SAFETY: the socket's live id.
    let idr = unsafe { &*s.id };
    if idr.c.qp.is_null() {
        return Ok(());
    }
    // SAFETY: the QP's context's ops.
    let poll = unsafe { (*(*idr.c.qp).context).ops.poll_cq }.ok_or(libc::ENOSYS)?;
    // SAFETY: all-zero is a valid ibv_wc.
    let mut wc: ibv_wc = unsafe { core::mem::zeroed() };
    if s.sending {
        // SAFETY: the id's send CQ; room for one completion.
        let n = unsafe { poll(idr.c.send_cq, 1, &mut wc) };
        if n > 0 {
            s.sending = false;
            if wc.status != IBV_WC_SUCCESS {
                s.eof = true;
                return Err(libc::ECONNRESET);
            }
        }
    }
    if s.current.is_none() && !s.eof {
        // SAFETY: the id's receive CQ; room for one completion.
        let n = unsafe { poll(idr.c.recv_cq, 1, &mut wc) };
        if n > 0 {
            let i = (wc.wr_id as usize).min(DEPTH - 1);
            if wc.status != IBV_WC_SUCCESS
                || (wc.byte_len == 0 && wc.wc_flags & IBV_WC_WITH_IMM == 0)
            {
                // A flush (the connection is gone) or the peer's end of stream.
                s.eof = true;
            } else if wc.wc_flags & IBV_WC_WITH_IMM != 0 {
                // A control message: an riomap announcement.
                // SAFETY: reading the immediate of a completion that has one.
                let imm = u32::from_be(unsafe { wc.imm.imm_data });
                if imm == IOMAP && wc.byte_len as usize >= IOMAP_LEN {
                    let b = &s.bufs[i * CHUNK..i * CHUNK + IOMAP_LEN];
                    let u64_at =
                        |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
                    let rkey = u32::from_le_bytes(b[24..28].try_into().unwrap_or([0; 4]));
                    let m = (u64_at(0), u64_at(8), u64_at(16), rkey);
                    if s.peer_maps.len() < MAX_MAPS {
                        s.peer_maps.push(m);
                    }
                }
                post_recv(s, i)?;
            } else {
                s.current = Some((i, 0, (wc.byte_len as usize).min(CHUNK)));
            }
        }
    }
    Ok(())
}

/// Waits a little between polls of a blocking call.
fn pause(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else if *spins < 256 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// `rrecv`: up to `buf.len()` bytes; 0 at the end of the stream.
pub fn recv(fd: c_int, buf: &mut [u8], flags: c_int) -> Result<usize, i32> {
    let s = get(fd)?;
    let mut s = lock(&s);
    if s.state != State::Connected {
        return Err(libc::ENOTCONN);
    }
    let nonblock = s.nonblock || flags & libc::MSG_DONTWAIT != 0;
    let waitall = flags & libc::MSG_WAITALL != 0;
    let mut got = 0;
    let mut spins = 0;
    while got < buf.len() {
        progress(&mut s)?;
        if let Some((i, at, end)) = s.current {
            let n = (end - at).min(buf.len() - got);
            buf[got..got + n].copy_from_slice(&s.bufs[i * CHUNK + at..i * CHUNK + at + n]);
            got += n;
            if at + n == end {
                s.current = None;
                post_recv(&mut s, i)?;
            } else {
                s.current = Some((i, at + n, end));
            }
            if !waitall {
                break;
            }
            continue;
        }
        if s.eof {
            break;
        }
        if got > 0 && !waitall {
            break;
        }
        if nonblock {
            if got > 0 {
                break;
            }
            return Err(libc::EAGAIN);
        }
        pause(&mut spins);
    }
    Ok(got)
}

/// `rsend`: sends `buf` in SENDs of up to [`CHUNK`] bytes, each complete before the
/// next (the bounce buffer is reused); returns the bytes sent.
pub fn send(fd: c_int, buf: &[u8], flags: c_int) -> Result<usize, i32> {
    let s = get(fd)?;
    let mut s = lock(&s);
    if s.state != State::Connected {
        return Err(libc::ENOTCONN);
    }
    let nonblock = s.nonblock || flags & libc::MSG_DONTWAIT != 0;
    let mut sent = 0;
    loop {
        let n = (buf.len() - sent).min(CHUNK);
        post_send(&mut s, &buf[sent..sent + n], nonblock && sent > 0)?;
        sent += n;
        if sent == buf.len() {
            return Ok(sent);
        }
    }
}

/// Sends `data` (at most [`CHUNK`] bytes) as stream data.
fn post_send(s: &mut Sock, data: &[u8], may_stop: bool) -> Result<(), i32> {
    post(s, data, may_stop, Op::Send)
}

/// What a post does with the bounce buffer's bytes.
#[derive(Clone, Copy)]
enum Op {
    /// SEND: stream data.
    Send,
    /// SEND_WITH_IMM: a control message.
    Control(u32),
    /// RDMA WRITE to (address, rkey) of the peer.
    Write(u64, u32),
}

/// Copies `data` (at most [`CHUNK`] bytes) into the bounce buffer and posts `op` with
/// it, after the post before it completed; waits for its completion.
fn post(s: &mut Sock, data: &[u8], may_stop: bool, op: Op) -> Result<(), i32> {
    let mut spins = 0;
    while s.sending {
        progress(s)?;
        if s.sending {
            if may_stop {
                return Err(libc::EAGAIN);
            }
            pause(&mut spins);
        }
    }
    let off = DEPTH * CHUNK;
    s.bufs[off..off + data.len()].copy_from_slice(data);
    // SAFETY: the socket's live id, QP and MR.
    let (qp, lkey) = unsafe { ((*s.id).c.qp, (*s.mr).lkey) };
    let mut sge = ibv_sge {
        addr: s.bufs[off..].as_ptr() as u64,
        length: data.len() as u32,
        lkey,
    };
    // SAFETY: all-zero is a valid ibv_send_wr (no opcode-specific fields used).
    let mut wr: ibv_send_wr = unsafe { core::mem::zeroed() };
    wr.sg_list = &mut sge;
    wr.num_sge = i32::from(!data.is_empty());
    wr.send_flags = IBV_SEND_SIGNALED;
    match op {
        Op::Send => wr.opcode = IBV_WR_SEND,
        Op::Control(imm) => {
            wr.opcode = IBV_WR_SEND_WITH_IMM;
            wr.imm.imm_data = imm.to_be();
        }
        Op::Write(remote_addr, rkey) => {
            wr.opcode = IBV_WR_RDMA_WRITE;
            wr.wr.rdma = ibv_send_wr_rdma { remote_addr, rkey };
        }
    }
    let mut bad = ptr::null_mut();
    // SAFETY: the QP's context's ops; a valid one-entry request within the MR.
    let rc = unsafe {
        let post = (*(*qp).context).ops.post_send.ok_or(libc::ENOSYS)?;
        post(qp, &mut wr, &mut bad)
    };
    if rc != 0 {
        return Err(rc);
    }
    s.sending = true;
    // Wait for it: the next send reuses the buffer, and a close must not lose it.
    while s.sending {
        progress(s)?;
        if s.sending {
            pause(&mut spins);
        }
    }
    Ok(())
}

/// `rshutdown`: `SHUT_WR` or `SHUT_RDWR` ends the stream for the peer.
pub fn shutdown(fd: c_int, how: c_int) -> Result<(), i32> {
    let s = get(fd)?;
    let mut s = lock(&s);
    if s.state != State::Connected {
        return Err(libc::ENOTCONN);
    }
    if how == libc::SHUT_WR || how == libc::SHUT_RDWR {
        post_send(&mut s, &[], false)?;
    }
    if how == libc::SHUT_RD || how == libc::SHUT_RDWR {
        s.eof = true;
    }
    Ok(())
}

/// `rclose`: ends the stream, disconnects, frees everything.
pub fn close(fd: c_int) -> Result<(), i32> {
    let s = table()
        .as_mut()
        .and_then(|t| t.remove(&fd))
        .ok_or(libc::EBADF)?;
    let mut s = lock(&s);
    if s.state == State::Connected {
        let _ = post_send(&mut s, &[], false);
        // SAFETY: the socket's live id.
        let _ = id::disconnect(unsafe { &mut *s.id });
    }
    s.state = State::Closed;
    if let Ok(t) = verbs::table() {
        for (_, _, _, mr) in s.local_maps.drain(..) {
            // SAFETY: an MR riomap registered and riounmap did not release.
            unsafe { (t.dereg_mr)(mr) };
        }
    }
    if !s.mr.is_null() {
        if let Ok(t) = verbs::table() {
            // SAFETY: the MR registered in `prepare`, deregistered once.
            unsafe { (t.dereg_mr)(s.mr) };
        }
        s.mr = ptr::null_mut();
    }
    // SAFETY: the socket's live id, destroyed once (its QP and CQs with it).
    unsafe {
        id::destroy_qp_of(&mut *s.id);
        id::destroy_id(s.id)
    }
}

/// `rfcntl`: `F_GETFL`, `F_SETFL` (`O_NONBLOCK`).
pub fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> Result<c_int, i32> {
    let s = get(fd)?;
    let mut s = lock(&s);
    match cmd {
        libc::F_GETFL => Ok(libc::O_RDWR | if s.nonblock { libc::O_NONBLOCK } else { 0 }),
        libc::F_SETFL => {
            s.nonblock = arg as c_int & libc::O_NONBLOCK != 0;
            Ok(0)
        }
        _ => Err(libc::ENOSYS),
    }
}

/// Whether the cm id's own channel has an event queued (a listener's request).
fn request_waiting(id: *mut Id) -> bool {
    let mut p = libc::pollfd {
        fd: number(id),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

/// Whether a socket has bytes (or its end) to read, or, listening, a request.
fn readable(s: &mut Sock) -> bool {
    if s.state == State::Listening {
        return request_waiting(s.id);
    }
    let _ = progress(s);
    s.current.is_some() || s.eof
}

/// `rpoll`: rsockets and ordinary descriptors together, by polling both in turn until
/// one is ready or `timeout` ms pass. A listener shows POLLIN while a connection
/// request waits for `raccept`.
///
/// # Safety
/// `fds` holds `nfds` entries.
pub unsafe fn poll(fds: *mut libc::pollfd, nfds: u64, timeout: c_int) -> Result<c_int, i32> {
    let fds = if nfds == 0 {
        &mut [][..]
    } else {
        // SAFETY: the caller's array.
        unsafe { core::slice::from_raw_parts_mut(fds, nfds as usize) }
    };
    let end = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let mut spins = 0;
    loop {
        let mut ready = 0;
        for p in fds.iter_mut() {
            p.revents = 0;
            if let Ok(s) = get(p.fd) {
                let mut s = lock(&s);
                if p.events & libc::POLLIN != 0 && readable(&mut s) {
                    p.revents |= libc::POLLIN;
                }
                if p.events & libc::POLLOUT != 0 && s.state == State::Connected {
                    p.revents |= libc::POLLOUT;
                }
                if s.eof {
                    p.revents |= libc::POLLHUP;
                }
            } else {
                let mut one = libc::pollfd {
                    fd: p.fd,
                    events: p.events,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, no wait.
                if unsafe { libc::poll(&mut one, 1, 0) } > 0 {
                    p.revents = one.revents;
                }
            }
            if p.revents != 0 {
                ready += 1;
            }
        }
        if ready > 0 || end.is_some_and(|e| Instant::now() >= e) {
            return Ok(ready);
        }
        pause(&mut spins);
    }
}

/// `rgetsockopt`: `SO_ERROR` is 0; any other option reads as 0.
///
/// # Safety
/// `val` and `len` are null or the caller's buffer and its length.
pub unsafe fn getsockopt(
    fd: c_int,
    val: *mut libc::c_void,
    len: *mut libc::socklen_t,
) -> Result<(), i32> {
    get(fd)?;
    if !val.is_null() && !len.is_null() {
        // SAFETY: the caller's buffer of `*len` bytes.
        unsafe {
            let n = (*len as usize).min(4);
            ptr::write_bytes(val.cast::<u8>(), 0, n);
            *len = n as libc::socklen_t;
        }
    }
    Ok(())
}

/// `rsetsockopt`: accepted (buffer sizes, `TCP_NODELAY`, keep-alive, rsocket options
/// have no effect here).
pub fn setsockopt(fd: c_int) -> Result<(), i32> {
    get(fd).map(|_| ())
}

/// `rgetsockname` (`peer` false) and `rgetpeername` (`peer` true).
///
/// # Safety
/// `sa` and `len` are null or the caller's buffer and its length.
pub unsafe fn name(
    fd: c_int,
    peer: bool,
    sa: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> Result<(), i32> {
    let s = get(fd)?;
    let s = lock(&s);
    // SAFETY: the socket's live id.
    let c: &rdma_cm_id = unsafe { &(*s.id).c };
    let st = if peer {
        &c.route.addr.dst
    } else {
        &c.route.addr.src
    };
    // SAFETY: the caller's buffer.
    unsafe { write_addr(st, sa, len) };
    Ok(())
}

/// `riomap`: registers `len` bytes at `buf` for the peer's `riowrite`s at `offset` (-1:
/// the next offset free) and announces them; returns the offset.
///
/// # Safety
/// `buf` is `len` writable bytes that stay the caller's until `riounmap`.
pub unsafe fn iomap(
    fd: c_int,
    buf: *mut libc::c_void,
    len: usize,
    offset: i64,
) -> Result<i64, i32> {
    let s = get(fd)?;
    let mut s = lock(&s);
    if s.state != State::Connected {
        return Err(libc::ENOTCONN);
    }
    if buf.is_null() || len == 0 || s.local_maps.len() >= MAX_MAPS {
        return Err(libc::EINVAL);
    }
    let offset = if offset < 0 {
        s.local_maps
            .iter()
            .map(|m| m.0 + m.2 as u64)
            .max()
            .unwrap_or(0)
    } else {
        offset as u64
    };
    let t = verbs::table()?;
    // SAFETY: the id's PD; the caller's buffer (its contract).
    let mr = unsafe {
        (t.reg_mr)(
            (*s.id).c.pd,
            buf,
            len,
            (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as c_int,
        )
    };
    if mr.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: the MR just registered.
    let rkey = unsafe { (*mr).rkey };
    let mut msg = [0u8; IOMAP_LEN];
    msg[0..8].copy_from_slice(&offset.to_le_bytes());
    msg[8..16].copy_from_slice(&(buf as u64).to_le_bytes());
    msg[16..24].copy_from_slice(&(len as u64).to_le_bytes());
    msg[24..28].copy_from_slice(&rkey.to_le_bytes());
    if let Err(e) = post(&mut s, &msg, false, Op::Control(IOMAP)) {
        // SAFETY: the MR just registered, not announced.
        unsafe { (t.dereg_mr)(mr) };
        return Err(e);
    }
    s.local_maps.push((offset, buf as usize, len, mr));
    Ok(offset as i64)
}

/// `riounmap`: deregisters a region `riomap` registered.
pub fn iounmap(fd: c_int, buf: *mut libc::c_void, len: usize) -> Result<(), i32> {
    let s = get(fd)?;
    let mut s = lock(&s);
    let i = s
        .local_maps
        .iter()
        .position(|m| m.1 == buf as usize && m.2 == len)
        .ok_or(libc::EINVAL)?;
    let (_, _, _, mr) = s.local_maps.remove(i);
    let t = verbs::table()?;
    // SAFETY: the MR riomap registered, deregistered once.
    unsafe { (t.dereg_mr)(mr) };
    Ok(())
}

/// `riowrite`: RDMA WRITEs `data` into the peer's region at `offset`, in pieces of
/// [`CHUNK`] bytes through the bounce buffer; returns the bytes written.
pub fn iowrite(fd: c_int, data: &[u8], offset: u64) -> Result<usize, i32> {
    let s = get(fd)?;
    let mut s = lock(&s);
    if s.state != State::Connected {
        return Err(libc::ENOTCONN);
    }
    let end = offset.checked_add(data.len() as u64).ok_or(libc::EINVAL)?;
    // The peer announced its regions before anything it sent after them; read on
    // until the one wanted has come (or data is waiting to be read first).
    let mut spins = 0;
    let map = loop {
        if let Some(m) = s
            .peer_maps
            .iter()
            .find(|m| m.0 <= offset && end <= m.0 + m.2)
            .copied()
        {
            break m;
        }
        if s.current.is_some() || s.eof || spins > 100_000 {
            return Err(libc::EINVAL);
        }
        progress(&mut s)?;
        pause(&mut spins);
    };
    let mut done = 0;
    while done < data.len() {
        let n = (data.len() - done).min(CHUNK);
        let at = map.1 + (offset - map.0) + done as u64;
        post(&mut s, &data[done..done + n], false, Op::Write(at, map.3))?;
        done += n;
    }
    Ok(done)
}
