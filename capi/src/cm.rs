//! Connecting through the RDMA connection manager: vqp-host's `cm` from C. The server
//! listens on an IP address and port and accepts one client; the client connects to
//! it. Each of the virtual QP's QPs is one CM connection carrying its piece of the
//! endpoint card, with the deadlines, agreement checks and refusal reasons of
//! `vqp_host::cm`; librdmacm is loaded at run time (`VQP_RDMACM_PATH`, else
//! `librdmacm.so.1`), so a machine without it gets `VQP_ERR_LIBRARY`, never a crash.

use std::ffi::c_char;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use vqp_host::cm::{self as host_cm, CmError, CmListener};
use vqp_host::loader::cm::RdmaCm;
use vqp_host::Error;

use crate::device::opt_str;
use crate::endpoint::{connect_with, state, timeout_of, Finish};
use crate::status::{guard, vqp_status, Fail, VQP_ERR_INVALID_ARGUMENT, VQP_ERR_PEER};
use crate::types::vqp_endpoint;

/// How long a client waits before asking again while nobody listens at the address.
const RETRY: Duration = Duration::from_millis(20);

/// The REJ reason "invalid service ID": nobody listens at the address (IBA table 112;
/// Linux's `IB_CM_REJ_INVALID_SERVICE_ID`, which rdma_cm reports as the REJECTED
/// event's status on InfiniBand and RoCE, and vqp-rdmacm likewise).
const REJ_INVALID_SERVICE_ID: i32 = 8;

/// Whether `e` says that nobody listens at the address: a REJ with reason 8, or on
/// iWARP the `-ECONNREFUSED` the kernel's rdma_cm reports as REJECTED (its
/// `cma_iw_handler`).
fn nobody_listens(e: &Error) -> bool {
    matches!(
        e,
        Error::RdmaCm(CmError::Rejected { status })
            if *status == REJ_INVALID_SERVICE_ID || *status == -libc::ECONNREFUSED
    )
}

/// The IP address and port in `p` (`a.b.c.d:port` or `[v6]:port`; port 0 is refused:
/// a client could not know which port a server was given).
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn address(p: *const c_char, what: &'static str) -> Result<SocketAddr, Fail> {
    // SAFETY: forwarded from this function's contract.
    let s = unsafe { opt_str(p, "the address is not UTF-8") }?.ok_or(Fail::null(what))?;
    let a: SocketAddr = s.parse().map_err(|_| {
        Fail::text(
            VQP_ERR_INVALID_ARGUMENT,
            format!("{s:?} is not an IP address and port (a.b.c.d:port or [v6]:port)"),
        )
    })?;
    if a.port() == 0 {
        return Err(Fail::invalid("the port must not be 0"));
    }
    Ok(a)
}

/// Server side of the RDMA-CM set-up: listens on `bind_addr` (an IP address of an RDMA
/// interface, or `0.0.0.0`, and a port: e.g. `"192.168.1.5:18515"`), takes the first
/// client's whole card within `timeout_ms` (0: 10 s) — one CM connection per QP, each
/// REQ carrying a piece of it —, checks it agrees with this side's (a card that does
/// not is refused on both sides with the reason), connects every QP, answers with this
/// side's card in the REPs and waits for the client's RTUs, so that both sides are
/// ready when it returns. The listener is closed before it returns; the CM
/// connections live as long as the endpoint (or its poll thread).
///
/// librdmacm is loaded from `VQP_RDMACM_PATH` when set, else `librdmacm.so.1`.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_WRONG_HANDLE`,
/// `VQP_ERR_STATE` (connected already, or spent), `VQP_ERR_INVALID_ARGUMENT` (not an
/// IP address and port), `VQP_ERR_LIBRARY` (librdmacm could not be loaded or lacks a
/// function), `VQP_ERR_TIMEOUT` (no client, or no RTU, in time), `VQP_ERR_CARD` (the
/// client's card was refused: the endpoint is unchanged and may serve again),
/// `VQP_ERR_PEER` (a CM call or event failed, e.g. the port is taken; the client
/// went away), `VQP_ERR_VERBS`. After an error past the card's check the endpoint is
/// spent.
///
/// Thread-safety: not concurrently with other calls on this endpoint. Blocks.
///
/// # Safety
/// `bind_addr` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_cm_serve(
    ep: vqp_endpoint,
    bind_addr: *const c_char,
    timeout_ms: u32,
) -> vqp_status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let addr = unsafe { address(bind_addr, "bind_addr is null") }?;
        // SAFETY: the contract of this call.
        let st = unsafe { state(ep) }?;
        let timeout = timeout_of(timeout_ms);
        connect_with(st, |e| {
            let mut listener = CmListener::bind(&RdmaCm::load()?, addr)?;
            let mine = e.card();
            let peer = listener.request(&mine, timeout)?;
            Ok((
                peer,
                Finish::CmServer {
                    listener,
                    mine,
                    timeout,
                },
            ))
        })
    })
}

/// Client side of the RDMA-CM set-up: connects to the server listening at `addr` (an
/// IP address and port, e.g. `"192.168.1.5:18515"`) within `timeout_ms` (0: 10 s):
/// resolves the address and the route, sends one REQ per QP carrying a piece of this
/// side's card, takes the server's card from its REPs and checks it agrees (a card
/// that does not is refused on both sides), connects every QP and sends the RTUs.
/// While nobody listens at the address yet (the REJ of an unknown service), it asks
/// again every 20 ms until the timeout, as `vqp_endpoint_dial` retries a refused TCP
/// connection; the server's QPs are ready when it returns.
///
/// librdmacm is loaded from `VQP_RDMACM_PATH` when set, else `librdmacm.so.1`.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_WRONG_HANDLE`,
/// `VQP_ERR_STATE`, `VQP_ERR_INVALID_ARGUMENT`, `VQP_ERR_LIBRARY`, `VQP_ERR_TIMEOUT`
/// (the server did not answer in time), `VQP_ERR_PEER` (the server refused this card
/// — its reason is in the message —, nobody listened there until the timeout, the
/// address did not resolve to an RDMA device, a CM call failed), `VQP_ERR_CARD` (the
/// server's card was refused here: the endpoint is unchanged), `VQP_ERR_VERBS`.
/// After an error past the card's check the endpoint is spent.
///
/// Thread-safety: not concurrently with other calls on this endpoint. Blocks.
///
/// # Safety
/// `addr` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_cm_dial(
    ep: vqp_endpoint,
    addr: *const c_char,
    timeout_ms: u32,
) -> vqp_status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let to = unsafe { address(addr, "addr is null") }?;
        // SAFETY: the contract of this call.
        let st = unsafe { state(ep) }?;
        let timeout = timeout_of(timeout_ms);
        connect_with(st, |e| {
            let deadline = Instant::now() + timeout;
            let cm = RdmaCm::load()?;
            let mine = e.card();
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match host_cm::connect(&cm, to, &mine, left) {
                    Ok((peer, dialled)) => return Ok((peer, Finish::CmClient(dialled))),
                    Err(err) if nobody_listens(&err) && left > RETRY * 2 => {
                        std::thread::sleep(RETRY)
                    }
                    Err(err) if nobody_listens(&err) => {
                        return Err(Fail::text(
                            VQP_ERR_PEER,
                            format!(
                                "nobody listened at {to} within {} ms ({err})",
                                timeout.as_millis()
                            ),
                        ))
                    }
                    Err(err) => return Err(err.into()),
                }
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unknown_service_or_a_refused_connection_is_nobody_listening() {
        let rej = |status| Error::RdmaCm(CmError::Rejected { status });
        assert!(nobody_listens(&rej(8)));
        assert!(nobody_listens(&rej(-libc::ECONNREFUSED)));
        assert!(!nobody_listens(&rej(28)));
        assert!(!nobody_listens(&Error::PeerRefused {
            reason: "no".into()
        }));
        assert!(!nobody_listens(&Error::RdmaCm(CmError::Timeout {
            stage: "connect",
            after: Duration::from_secs(1),
        })));
    }

    #[test]
    fn addresses_are_an_ip_and_a_port() {
        let ok = |s: &std::ffi::CStr| {
            // SAFETY: a NUL-terminated string.
            unsafe { address(s.as_ptr(), "null") }
        };
        assert_eq!(
            ok(c"127.0.0.1:18515").unwrap(),
            "127.0.0.1:18515".parse::<SocketAddr>().unwrap()
        );
        assert!(ok(c"[::1]:7").is_ok());
        for bad in [
            c"127.0.0.1",
            c"localhost:1",
            c"",
            c"1.2.3.4:0",
            c"1.2.3.4:70000",
        ] {
            let e = ok(bad).unwrap_err();
            assert_eq!(e.code, VQP_ERR_INVALID_ARGUMENT, "{bad:?}");
        }
        // SAFETY: null is allowed.
        let e = unsafe { address(std::ptr::null(), "null") }.unwrap_err();
        assert_eq!(e.code, crate::status::VQP_ERR_NULL);
    }
}
