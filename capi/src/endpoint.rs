//! Endpoints: settings, creation on one or several devices, the card, and connecting
//! (by card bytes, or over TCP with the host's exchange and its deadlines; through
//! RDMA-CM in [`crate::cm`]).
//!
//! An endpoint goes `created → connected`; a failed connect leaves it `spent` (the
//! QPs are gone), and every call but destroy then returns `VQP_ERR_STATE`.

use std::ffi::c_char;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Mode, Policy, Signaling};
use vqp_host::cm::{CmConnection, CmListener, Dialled};
use vqp_host::{exchange, Card, Connected, Endpoint, ProtectionDomain, Settings};

use crate::device::{opt_str, DEVICES};
use crate::status::{
    guard, vqp_status, Fail, VQP_ERR_PEER, VQP_ERR_STATE, VQP_ERR_STRUCT_SIZE, VQP_ERR_TIMEOUT,
    VQP_ERR_TOO_SMALL,
};
use crate::table::Table;
use crate::types::*;

const N: usize = vqp_core::caps::DATA_QPS;
const D: usize = vqp_core::caps::WQES;
const S: usize = vqp_core::caps::SLOTS;
const W: usize = vqp_core::caps::WINDOW;
const DEVS: usize = vqp_core::MAX_DEVICES;
const B: usize = vqp_core::caps::BATCH;

/// The one endpoint type C sees (capacities in the crate docs).
pub(crate) type Ep = Endpoint<N, D, S, W, DEVS, B>;

/// What a connected endpoint keeps of how it was set up, for as long as its QPs live.
pub(crate) enum Link {
    /// The application carried the cards.
    Cards,
    /// The exchange's TCP connection, kept open.
    Tcp { _stream: TcpStream },
    /// The QPs' RDMA-CM connections: disconnected when dropped, so they live as long
    /// as the QPs they announced.
    Cm { _connections: CmConnection },
}

/// A connected endpoint and what the data path keeps beside it.
pub(crate) struct Live {
    /// How it was set up (declared first, so that a CM connection is disconnected
    /// before the QPs are destroyed).
    pub link: Link,
    pub conn: Connected<N, D, S, W, DEVS, B>,
}

/// How the peer's card came, and what finishes the set-up once this side's QPs are
/// connected.
pub(crate) enum Finish {
    /// Nothing: the application meets the peer itself.
    Cards,
    /// The TCP exchange: a barrier on its connection.
    Tcp(TcpStream),
    /// The server side of RDMA-CM: the REPs carrying `mine`, then the client's RTUs,
    /// within the timeout.
    CmServer {
        listener: CmListener,
        mine: Card,
        timeout: Duration,
    },
    /// The client side of RDMA-CM: the RTUs.
    CmClient(Dialled),
}

/// An endpoint's state.
pub(crate) enum State {
    Created(Box<Ep>),
    Connected(Box<Live>),
    /// A failed connect consumed it, or a poll thread took it.
    Spent,
}

/// An endpoint: its state and its devices' contexts (for the poll thread's event
/// watcher), each with its device index.
pub(crate) struct Object {
    pub state: State,
    pub contexts: Vec<(vqp_host::Context, u8)>,
}

pub(crate) static ENDPOINTS: Table<Object> = Table::new(3);

const DEFAULT_TIMEOUT_MS: u32 = 10_000;

/// Fills `s` with the defaults: DQPLB, 4 data QPs, 64 KiB fragments, 64 WQEs per QP,
/// 64 receives, last-of-chain signaling, round-robin, port 1. `size` is
/// `sizeof(vqp_settings)`.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STRUCT_SIZE` (a header of another version:
/// nothing is written).
///
/// Thread-safety: any thread.
///
/// # Safety
/// `s` is null or writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn vqp_settings_init(s: *mut vqp_settings, size: usize) -> vqp_status {
    guard(|| {
        if s.is_null() {
            return Err(Fail::null("settings pointer is null"));
        }
        if size != std::mem::size_of::<vqp_settings>() {
            return Err(Fail::new(
                VQP_ERR_STRUCT_SIZE,
                "size is not sizeof(vqp_settings) of this library",
            ));
        }
        let c = Config::new(Mode::Dqplb);
        let v = vqp_settings {
            struct_size: size as u32,
            mode: VQP_MODE_DQPLB,
            data_qps: 4,
            policy: VQP_POLICY_ROUND_ROBIN,
            max_frag: c.split.max_frag,
            align: c.split.align,
            no_split_below: c.split.no_split_below,
            max_outstanding: c.max_outstanding,
            recv_depth: c.recv_depth,
            signaling: VQP_SIGNAL_LAST_OF_CHAIN,
            weights: c.weights,
            weights_from_ports: 1,
            redispatch: 0,
            fail_back: 0,
            port: 1,
            gid_index: -1,
            fanout: 0,
            min_cq_entries: 0,
            grace_ns: 0,
        };
        // SAFETY: `s` is non-null and writable for `size` == sizeof bytes.
        unsafe { s.write(v) };
        Ok(())
    })
}

/// Host settings from C's, every field checked.
fn settings_of(s: &vqp_settings) -> Result<Settings, Fail> {
    if s.struct_size as usize != std::mem::size_of::<vqp_settings>() {
        return Err(Fail::new(
            VQP_ERR_STRUCT_SIZE,
            "struct_size is not sizeof(vqp_settings) of this library (call vqp_settings_init)",
        ));
    }
    let mode = match s.mode {
        VQP_MODE_DQPLB => Mode::Dqplb,
        VQP_MODE_SPRAY => Mode::Spray,
        _ => {
            return Err(Fail::invalid(
                "mode is not VQP_MODE_DQPLB or VQP_MODE_SPRAY",
            ))
        }
    };
    let policy = match s.policy {
        VQP_POLICY_ROUND_ROBIN => Policy::RoundRobin,
        VQP_POLICY_WEIGHTED => Policy::Weighted,
        VQP_POLICY_LEAST_OUTSTANDING => Policy::LeastOutstanding,
        VQP_POLICY_ADAPTIVE => Policy::Adaptive,
        _ => return Err(Fail::invalid("policy is not one of VQP_POLICY_*")),
    };
    let signaling = match s.signaling {
        VQP_SIGNAL_LAST_OF_CHAIN => Signaling::LastOfChain,
        VQP_SIGNAL_EVERY => Signaling::Every,
        _ => return Err(Fail::invalid("signaling is not one of VQP_SIGNAL_*")),
    };
    let gid_index = match s.gid_index {
        -1 => None,
        g => Some(u8::try_from(g).map_err(|_| Fail::invalid("gid_index is not -1 or 0..=255"))?),
    };
    if s.port == 0 {
        return Err(Fail::invalid("port numbers start at 1"));
    }
    let fanout = u8::try_from(s.fanout).map_err(|_| Fail::invalid("fanout is above 255"))?;
    let config = Config {
        split: SplitPolicy {
            max_frag: s.max_frag,
            align: s.align,
            no_split_below: s.no_split_below,
        },
        max_outstanding: s.max_outstanding,
        recv_depth: s.recv_depth,
        signaling,
        policy,
        weights: s.weights,
        fanout,
        redispatch: s.redispatch != 0,
        grace_ns: s.grace_ns,
        ..Config::new(mode)
    };
    let mut out = Settings::new(config, s.data_qps as usize);
    out.port = s.port;
    out.gid_index = gid_index;
    out.min_cq_entries = s.min_cq_entries;
    out.weights_from_ports = s.weights_from_ports != 0;
    out.fail_back = s.fail_back != 0;
    Ok(out)
}

/// Creates an endpoint on `ndevices` devices (1 to `VQP_MAX_DEVICES`): its data QPs
/// (data QP `i` on `devices[i % ndevices]`, whose index is the request's key index),
/// the SPRAY notify QP on `devices[0]`, one CQ per device. The QPs wait in RESET
/// until `vqp_endpoint_connect`, `vqp_endpoint_serve` or `vqp_endpoint_dial`.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STRUCT_SIZE`,
/// `VQP_ERR_INVALID_ARGUMENT` (a field out of range, 0 or too many devices),
/// `VQP_ERR_CONFIG` (settings vqp-core refuses), `VQP_ERR_VERBS`.
///
/// Thread-safety: any thread, concurrently with other calls on the devices.
///
/// # Safety
/// `devices` is null or readable for `ndevices` handles; `settings` null or a
/// readable `vqp_settings`; `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_create(
    devices: *const vqp_device,
    ndevices: usize,
    settings: *const vqp_settings,
    out: *mut vqp_endpoint,
) -> vqp_status {
    guard(|| {
        if devices.is_null() || settings.is_null() || out.is_null() {
            return Err(Fail::null("devices, settings or out is null"));
        }
        if ndevices == 0 || ndevices > DEVS {
            return Err(Fail::invalid("ndevices must be 1 to VQP_MAX_DEVICES"));
        }
        // SAFETY: the caller gives a readable vqp_settings (its size is checked next
        // through struct_size, which is its first field).
        let s = settings_of(unsafe { &*settings })?;
        // SAFETY: `devices` holds `ndevices` handles (the contract).
        let handles = unsafe { std::slice::from_raw_parts(devices, ndevices) };
        let mut pds: Vec<ProtectionDomain> = Vec::with_capacity(ndevices);
        for h in handles {
            if h.handle == 0 {
                return Err(Fail::null("a device handle is null"));
            }
            let d = DEVICES.get(h.handle)?;
            // SAFETY: live handle, read only, not destroyed during the call.
            pds.push(unsafe { &*d }.pd.clone());
        }
        let refs: Vec<&ProtectionDomain> = pds.iter().collect();
        let ep = Ep::create_on(&refs, &s, &[])?;
        let contexts = pds
            .iter()
            .enumerate()
            .map(|(d, pd)| (pd.context(), d as u8))
            .collect();
        let handle = ENDPOINTS.insert(Object {
            state: State::Created(Box::new(ep)),
            contexts,
        })?;
        // SAFETY: `out` is non-null and writable.
        unsafe { out.write(vqp_endpoint { handle }) };
        Ok(())
    })
}

/// The endpoint's state for a set-up call: a `&mut` valid for the call.
///
/// # Safety
/// No other thread is in a call on this handle (the header's contract for set-up
/// calls).
pub(crate) unsafe fn state<'a>(ep: vqp_endpoint) -> Result<&'a mut State, Fail> {
    // SAFETY: forwarded.
    Ok(&mut unsafe { object(ep) }?.state)
}

/// The endpoint object, for a set-up call: a `&mut` valid for the call.
///
/// # Safety
/// As [`state`].
pub(crate) unsafe fn object<'a>(ep: vqp_endpoint) -> Result<&'a mut Object, Fail> {
    if ep.handle == 0 {
        return Err(Fail::null("endpoint handle is null"));
    }
    let p = ENDPOINTS.get(ep.handle)?;
    // SAFETY: live handle; exclusive by the caller's contract.
    Ok(unsafe { &mut *p })
}

/// Writes this side's card (what the peer needs to connect to it) into `buf` and its
/// length into `*len`. A buffer of `VQP_CARD_MAX` bytes always fits.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE` (already
/// connected), `VQP_ERR_TOO_SMALL` (`*len` says how much is needed), `VQP_ERR_CARD`.
///
/// Thread-safety: not concurrently with other calls on this endpoint.
///
/// # Safety
/// `buf` is null or writable for `cap` bytes; `len` null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_card(
    ep: vqp_endpoint,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> vqp_status {
    guard(|| {
        if buf.is_null() || len.is_null() {
            return Err(Fail::null("buf or len is null"));
        }
        // SAFETY: the contract of this call.
        let State::Created(e) = unsafe { state(ep) }? else {
            return Err(Fail::new(
                VQP_ERR_STATE,
                "the card is made before connecting",
            ));
        };
        let card = e.card();
        let need = card.encoded_len();
        // SAFETY: `len` is non-null and writable.
        unsafe { len.write(need) };
        if need > cap {
            return Err(Fail::new(
                VQP_ERR_TOO_SMALL,
                "the card does not fit buf (see *len)",
            ));
        }
        // SAFETY: `buf` has `cap` writable bytes (the contract) and nothing else
        // refers to them during the call.
        let out = unsafe { std::slice::from_raw_parts_mut(buf, cap) };
        card.encode(out)
            .map_err(|e| Fail::from(vqp_host::Error::Card(e)))?;
        Ok(())
    })
}

/// Moves a created endpoint to connected: `connect` gets the peer's card (an error
/// there leaves the endpoint as it was); its QPs are then connected and the set-up
/// finished as `connect` says (an error from here on leaves the endpoint spent).
pub(crate) fn connect_with(
    st: &mut State,
    connect: impl FnOnce(&Ep) -> Result<(Card, Finish), Fail>,
) -> Result<(), Fail> {
    let State::Created(e) = st else {
        return Err(Fail::new(
            VQP_ERR_STATE,
            "the endpoint is connected already, or a failed connect spent it",
        ));
    };
    let (peer, finish) = connect(e)?;
    let State::Created(e) = std::mem::replace(st, State::Spent) else {
        // Matched above; nothing between could change it.
        return Err(Fail::new(
            VQP_ERR_STATE,
            "the endpoint changed state during connect",
        ));
    };
    let conn = e.connect(&peer)?;
    let link = match finish {
        Finish::Cards => Link::Cards,
        Finish::Tcp(mut s) => {
            exchange::barrier(&mut s)?;
            Link::Tcp { _stream: s }
        }
        Finish::CmServer {
            mut listener,
            mine,
            timeout,
        } => Link::Cm {
            _connections: listener.accept(&mine, timeout)?,
        },
        Finish::CmClient(d) => Link::Cm {
            _connections: d.establish()?,
        },
    };
    *st = State::Connected(Box::new(Live { link, conn }));
    Ok(())
}

/// Connects to the peer whose card (from its `vqp_endpoint_card`, carried by the
/// application) is `card[0..len]`: checks it agrees with this side's, takes every QP
/// to RTS. The application then meets the peer (a barrier of its own) before posting,
/// so that neither side sends to a QP the other has not yet made ready.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE` (connected
/// already), `VQP_ERR_CARD` (malformed or disagreeing: the endpoint is unchanged),
/// `VQP_ERR_VERBS` (a transition failed: the endpoint is spent).
///
/// Thread-safety: not concurrently with other calls on this endpoint.
///
/// # Safety
/// `card` is null or readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_connect(
    ep: vqp_endpoint,
    card: *const u8,
    len: usize,
) -> vqp_status {
    guard(|| {
        if card.is_null() {
            return Err(Fail::null("card is null"));
        }
        // SAFETY: the contract of this call.
        let st = unsafe { state(ep) }?;
        // SAFETY: `card` is readable for `len` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(card, len) };
        connect_with(st, |e| {
            let peer = Card::decode(bytes).map_err(|e| Fail::from(vqp_host::Error::Card(e)))?;
            peer.validate()
                .and_then(|()| e.card().agree(&peer))
                .map_err(|e| Fail::from(vqp_host::Error::Card(e)))?;
            Ok((peer, Finish::Cards))
        })
    })
}

/// A call's timeout: `ms`, or 10 s for 0.
pub(crate) fn timeout_of(ms: u32) -> Duration {
    Duration::from_millis(u64::from(if ms == 0 { DEFAULT_TIMEOUT_MS } else { ms }))
}

/// Server side of the TCP set-up: listens on `bind_addr` (e.g. `"0.0.0.0:18515"`),
/// accepts one peer within `timeout_ms` (0: 10 s), exchanges cards with it (each
/// message within the timeout; a card that does not agree is refused on both sides
/// with the reason), connects every QP, and meets the peer so that both are ready
/// when it returns.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE`,
/// `VQP_ERR_INVALID_ARGUMENT` (address), `VQP_ERR_TIMEOUT` (no peer or no answer in
/// time), `VQP_ERR_PEER`, `VQP_ERR_CARD`, `VQP_ERR_VERBS`. After an error past the
/// card exchange the endpoint is spent.
///
/// Thread-safety: not concurrently with other calls on this endpoint. Blocks.
///
/// # Safety
/// `bind_addr` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_serve(
    ep: vqp_endpoint,
    bind_addr: *const c_char,
    timeout_ms: u32,
) -> vqp_status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let addr = unsafe { opt_str(bind_addr, "the address is not UTF-8") }?
            .ok_or(Fail::null("bind_addr is null"))?;
        // SAFETY: the contract of this call.
        let st = unsafe { state(ep) }?;
        let timeout = timeout_of(timeout_ms);
        connect_with(st, |e| {
            let listener = TcpListener::bind(addr)
                .map_err(|e| Fail::text(VQP_ERR_PEER, format!("bind {addr}: {e}")))?;
            let stream = accept_within(&listener, timeout)?;
            let mut stream = stream;
            let peer = exchange::exchange_timeout(&mut stream, &e.card(), timeout)?;
            Ok((peer, Finish::Tcp(stream)))
        })
    })
}

/// Accepts one connection on `listener` before `timeout` passes.
fn accept_within(listener: &TcpListener, timeout: Duration) -> Result<TcpStream, Fail> {
    let io = |e: std::io::Error| Fail::text(VQP_ERR_PEER, format!("accept: {e}"));
    listener.set_nonblocking(true).map_err(io)?;
    let until = Instant::now() + timeout;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(io)?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= until {
                    return Err(Fail::new(VQP_ERR_TIMEOUT, "no peer connected in time"));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(io(e)),
        }
    }
}

/// Client side of the TCP set-up: connects to the peer serving at `addr` (retrying
/// while it does not listen yet, for up to `timeout_ms`; 0: 10 s), exchanges cards,
/// connects every QP, and meets the peer.
///
/// Errors: as `vqp_endpoint_serve`.
///
/// Thread-safety: not concurrently with other calls on this endpoint. Blocks.
///
/// # Safety
/// `addr` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_dial(
    ep: vqp_endpoint,
    addr: *const c_char,
    timeout_ms: u32,
) -> vqp_status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let addr = unsafe { opt_str(addr, "the address is not UTF-8") }?
            .ok_or(Fail::null("addr is null"))?;
        // SAFETY: the contract of this call.
        let st = unsafe { state(ep) }?;
        let timeout = timeout_of(timeout_ms);
        connect_with(st, |e| {
            let (peer, stream) = exchange::connect_timeout(addr, &e.card(), timeout)?;
            Ok((peer, Finish::Tcp(stream)))
        })
    })
}

/// The connected state of `ep`, for calls that need one.
///
/// # Safety
/// As [`state`].
pub(crate) unsafe fn live<'a>(ep: vqp_endpoint) -> Result<&'a mut Live, Fail> {
    // SAFETY: forwarded.
    match unsafe { state(ep) }? {
        State::Connected(l) => Ok(l),
        _ => Err(Fail::new(VQP_ERR_STATE, "the endpoint is not connected")),
    }
}

/// What one data QP (`qp`, 0 to data QPs − 1) of a connected endpoint did.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE` (not connected),
/// `VQP_ERR_INVALID_ARGUMENT` (no such QP).
///
/// Thread-safety: not concurrently with other calls on this endpoint (it reads what
/// post and poll write).
///
/// # Safety
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_qp_stats(
    ep: vqp_endpoint,
    qp: u32,
    out: *mut vqp_qp_stats,
) -> vqp_status {
    guard(|| {
        if out.is_null() {
            return Err(Fail::null("out is null"));
        }
        // SAFETY: the contract of this call.
        let l = unsafe { live(ep) }?;
        let i = qp as usize;
        let v = &l.conn.vqp;
        let (Some(st), Some(num), Some(dev)) =
            (v.lane_stats(i), v.data_qp_num(i), v.data_qp_device(i))
        else {
            return Err(Fail::invalid("no data QP of that index"));
        };
        let s = vqp_qp_stats {
            wqes: st.wqes,
            bytes: st.bytes,
            chains: st.chains,
            cqes: st.cqes,
            recvs: st.recvs,
            qp_num: num,
            device: u32::from(dev),
            failed: u32::from(v.data_qp_failed(i)),
            reserved: 0,
        };
        // SAFETY: `out` is non-null and writable.
        unsafe { out.write(s) };
        Ok(())
    })
}

/// Destroys the endpoint (its QPs and CQs; requests in flight are abandoned, so
/// stop posting and poll first). The handle and its copies are stale after.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_WRONG_HANDLE`.
///
/// Thread-safety: not while another thread is in a call on this endpoint.
#[no_mangle]
pub extern "C" fn vqp_endpoint_destroy(ep: vqp_endpoint) -> vqp_status {
    guard(|| {
        if ep.handle == 0 {
            return Err(Fail::null("endpoint handle is null"));
        }
        drop(ENDPOINTS.remove(ep.handle)?);
        Ok(())
    })
}
