//! Status codes: every call returns one, and [`vqp_status_str`] names it. The last
//! failing call on a thread leaves a longer message, read with
//! [`vqp_last_error_message`].

use std::cell::{Cell, RefCell};
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use vqp_core::{PollFailure, PostRecvError, PostSendError};
use vqp_host::cm::CmError;
use vqp_host::Error;

/// What a call did. `VQP_OK` (0) is success; every other value is an error, named by
/// [`vqp_status_str`].
#[allow(non_camel_case_types)]
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum vqp_status {
    /// Success.
    VQP_OK = 0,
    /// A required pointer or handle is null (zero).
    VQP_ERR_NULL = 1,
    /// The handle was destroyed (or never issued by this library): a stale handle.
    VQP_ERR_STALE_HANDLE = 2,
    /// A struct's `struct_size` is not the size this library was built with.
    VQP_ERR_STRUCT_SIZE = 3,
    /// An argument is out of range (a length, a count, a string that is not UTF-8).
    VQP_ERR_INVALID_ARGUMENT = 4,
    /// The call does not fit the object's state (posting before connecting,
    /// connecting twice, using an endpoint whose connect failed).
    VQP_ERR_STATE = 5,
    /// The caller's buffer is too small; the size needed is reported.
    VQP_ERR_TOO_SMALL = 6,
    /// The verbs library (or, for the RDMA-CM calls, librdmacm) could not be loaded or
    /// lacks a function.
    VQP_ERR_LIBRARY = 7,
    /// No RDMA device, or none of the name asked for.
    VQP_ERR_NO_DEVICE = 8,
    /// A verb failed (its errno is in the last error message).
    VQP_ERR_VERBS = 9,
    /// The settings are refused (vqp-core's configuration checks).
    VQP_ERR_CONFIG = 10,
    /// An endpoint card is malformed or does not agree with this side's.
    VQP_ERR_CARD = 11,
    /// The exchange with the peer failed, over TCP or through RDMA-CM: it refused (its
    /// reason is in the message), closed, sent garbage, or the connection could not be
    /// made.
    VQP_ERR_PEER = 12,
    /// The peer did not answer before the deadline.
    VQP_ERR_TIMEOUT = 13,
    /// Backpressure: every slot is taken; poll completions and retry.
    VQP_ERR_FULL = 14,
    /// The virtual QP failed and takes no new requests.
    VQP_ERR_FAILED = 15,
    /// The request is refused as written (unknown opcode, zero length, missing key…);
    /// nothing of it was posted.
    VQP_ERR_REQUEST = 16,
    /// Polling a completion queue failed.
    VQP_ERR_POLL = 17,
    /// Out of memory, or out of handles.
    VQP_ERR_NO_MEMORY = 18,
    /// A handle of another type was given (e.g. a memory region where an endpoint
    /// goes).
    VQP_ERR_WRONG_HANDLE = 19,
    /// An internal error was caught at the C boundary (a bug in vqp: please report).
    VQP_ERR_PANIC = 20,
}

pub use vqp_status::*;

/// A failed call: its code and, on the control path, its message. The data path's
/// failures carry a copyable detail instead of text, so reporting them allocates
/// nothing.
#[derive(Debug)]
pub(crate) struct Fail {
    pub code: vqp_status,
    pub detail: Detail,
}

/// The text of a [`Fail`].
#[derive(Debug)]
pub(crate) enum Detail {
    Static(&'static str),
    Text(String),
    Send(PostSendError),
    Recv(PostRecvError),
    Poll(PollFailure),
}

impl Fail {
    pub(crate) const fn new(code: vqp_status, what: &'static str) -> Fail {
        Fail {
            code,
            detail: Detail::Static(what),
        }
    }

    pub(crate) fn text(code: vqp_status, what: String) -> Fail {
        Fail {
            code,
            detail: Detail::Text(what),
        }
    }

    pub(crate) const fn null(what: &'static str) -> Fail {
        Fail::new(VQP_ERR_NULL, what)
    }

    pub(crate) const fn invalid(what: &'static str) -> Fail {
        Fail::new(VQP_ERR_INVALID_ARGUMENT, what)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let code = match &e {
            Error::LibraryNotFound { .. }
            | Error::SymbolMissing { .. }
            | Error::OpMissing { .. }
            | Error::RdmaCmLibrary { .. } => VQP_ERR_LIBRARY,
            Error::NoDevices { .. } | Error::DeviceNotFound { .. } => VQP_ERR_NO_DEVICE,
            Error::Verbs { .. } | Error::PostFailed { .. } | Error::BadCompletion { .. } => {
                VQP_ERR_VERBS
            }
            Error::InvalidArgument { .. } => VQP_ERR_INVALID_ARGUMENT,
            Error::Card(_) => VQP_ERR_CARD,
            Error::PeerTimeout { .. } | Error::RdmaCm(CmError::Timeout { .. }) => VQP_ERR_TIMEOUT,
            // The peer's private data is no card piece: its card is malformed.
            Error::RdmaCm(CmError::Piece(_)) => VQP_ERR_CARD,
            Error::Build(_) | Error::Cq(_) | Error::Restore(_) => VQP_ERR_CONFIG,
            _ => VQP_ERR_PEER,
        };
        Fail::text(code, e.to_string())
    }
}

impl From<PostSendError> for Fail {
    fn from(e: PostSendError) -> Fail {
        let code = match e {
            PostSendError::Full => VQP_ERR_FULL,
            PostSendError::Failed(_) => VQP_ERR_FAILED,
            _ => VQP_ERR_REQUEST,
        };
        Fail {
            code,
            detail: Detail::Send(e),
        }
    }
}

impl From<PostRecvError> for Fail {
    fn from(e: PostRecvError) -> Fail {
        let code = match e {
            PostRecvError::Full => VQP_ERR_FULL,
            PostRecvError::Failed(_) => VQP_ERR_FAILED,
            _ => VQP_ERR_REQUEST,
        };
        Fail {
            code,
            detail: Detail::Recv(e),
        }
    }
}

impl From<PollFailure> for Fail {
    fn from(e: PollFailure) -> Fail {
        Fail {
            code: VQP_ERR_POLL,
            detail: Detail::Poll(e),
        }
    }
}

/// The last failure's detail on this thread. Data-path details are `Copy` and kept in
/// a `Cell` apart from the control path's text, so that recording them never touches
/// the heap.
#[derive(Clone, Copy)]
enum Last {
    None,
    Static(&'static str),
    Text,
    Send(PostSendError),
    Recv(PostRecvError),
    Poll(PollFailure),
}

thread_local! {
    static LAST: Cell<Last> = const { Cell::new(Last::None) };
    static LAST_TEXT: RefCell<String> = const { RefCell::new(String::new()) };
}

fn record(detail: Detail) {
    let last = match detail {
        Detail::Static(s) => Last::Static(s),
        Detail::Send(e) => Last::Send(e),
        Detail::Recv(e) => Last::Recv(e),
        Detail::Poll(e) => Last::Poll(e),
        Detail::Text(t) => {
            LAST_TEXT.with(|s| *s.borrow_mut() = t);
            Last::Text
        }
    };
    LAST.with(|l| l.set(last));
}

fn last_message() -> String {
    match LAST.with(Cell::get) {
        Last::None => String::new(),
        Last::Static(s) => s.to_owned(),
        Last::Text => LAST_TEXT.with(|s| s.borrow().clone()),
        Last::Send(e) => e.to_string(),
        Last::Recv(e) => e.to_string(),
        Last::Poll(e) => e.to_string(),
    }
}

/// Runs one C entry point: its result becomes a status, its error is recorded for
/// [`vqp_last_error_message`], and a panic is caught here, never unwinding into C.
///
/// The closure's result is turned into the status inside the caught call, so that
/// what crosses `catch_unwind` is an `i32` (the data path's success costs a compare,
/// not a copy of a `Result` through memory), and the error path is out of line.
#[inline(always)]
pub(crate) fn guard(f: impl FnOnce() -> Result<(), Fail>) -> vqp_status {
    let caught = catch_unwind(AssertUnwindSafe(|| match f() {
        Ok(()) => VQP_OK,
        Err(fail) => failed(fail),
    }));
    match caught {
        Ok(code) => code,
        Err(_) => panicked(),
    }
}

/// Records `fail` for [`vqp_last_error_message`] and returns its code.
#[cold]
#[inline(never)]
fn failed(fail: Fail) -> vqp_status {
    let code = fail.code;
    record(fail.detail);
    code
}

/// The status of a caught panic.
#[cold]
#[inline(never)]
fn panicked() -> vqp_status {
    // Recording the message may itself fail (a poisoned thread-local); even then
    // nothing unwinds further.
    let _ = catch_unwind(|| {
        record(Detail::Static(
            "internal error caught at the C boundary (a bug in vqp)",
        ))
    });
    VQP_ERR_PANIC
}

/// The name of a status code, e.g. `"VQP_ERR_FULL: backpressure…"`: a static string,
/// never null, also for a value that is no status.
///
/// Thread-safety: any thread, any time.
#[no_mangle]
pub extern "C" fn vqp_status_str(status: i32) -> *const c_char {
    let s: &'static str = match status {
        0 => "VQP_OK: success\0",
        1 => "VQP_ERR_NULL: a required pointer or handle is null\0",
        2 => "VQP_ERR_STALE_HANDLE: the handle was destroyed or never issued\0",
        3 => "VQP_ERR_STRUCT_SIZE: struct_size does not match this library's struct\0",
        4 => "VQP_ERR_INVALID_ARGUMENT: an argument is out of range\0",
        5 => "VQP_ERR_STATE: the call does not fit the object's state\0",
        6 => "VQP_ERR_TOO_SMALL: the buffer is too small\0",
        7 => "VQP_ERR_LIBRARY: the verbs library or librdmacm could not be loaded\0",
        8 => "VQP_ERR_NO_DEVICE: no such RDMA device\0",
        9 => "VQP_ERR_VERBS: a verb failed\0",
        10 => "VQP_ERR_CONFIG: the settings are refused\0",
        11 => "VQP_ERR_CARD: the endpoint card is malformed or does not agree\0",
        12 => "VQP_ERR_PEER: the exchange with the peer failed\0",
        13 => "VQP_ERR_TIMEOUT: the peer did not answer in time\0",
        14 => "VQP_ERR_FULL: every slot is taken; poll and retry\0",
        15 => "VQP_ERR_FAILED: the virtual QP failed and takes no new requests\0",
        16 => "VQP_ERR_REQUEST: the request is refused as written; nothing was posted\0",
        17 => "VQP_ERR_POLL: polling a completion queue failed\0",
        18 => "VQP_ERR_NO_MEMORY: out of memory or handles\0",
        19 => "VQP_ERR_WRONG_HANDLE: a handle of another type was given\0",
        20 => "VQP_ERR_PANIC: internal error caught at the C boundary\0",
        _ => "unknown vqp status\0",
    };
    s.as_ptr().cast()
}

/// Copies the message of the last failed call on the calling thread into `buf` (at
/// most `len` bytes, NUL-terminated when `len > 0`) and returns the message's full
/// length without the NUL, so a caller can size a second try. An empty message when
/// no call failed yet. `buf` may be null when `len` is 0.
///
/// Data-path calls (post, poll) record their failure without allocating; the text is
/// made here.
///
/// Thread-safety: any thread; each thread has its own last error.
///
/// # Safety
/// `buf` is null or valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn vqp_last_error_message(buf: *mut c_char, len: usize) -> usize {
    catch_unwind(|| {
        let msg = last_message();
        let bytes = msg.as_bytes();
        if !buf.is_null() && len > 0 {
            let n = bytes.len().min(len - 1);
            // SAFETY: the caller gives `len` writable bytes at `buf`; n + 1 <= len, and
            // `msg` is a fresh String that cannot overlap the caller's buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        bytes.len()
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let st = guard(|| panic!("boom"));
        assert_eq!(st, VQP_ERR_PANIC);
        assert!(last_message().contains("internal error"));
    }

    #[test]
    fn every_code_has_a_name_and_others_are_unknown() {
        for c in 0..=20 {
            // SAFETY: vqp_status_str returns a static NUL-terminated string.
            let s = unsafe { std::ffi::CStr::from_ptr(vqp_status_str(c)) };
            assert!(s.to_str().unwrap().starts_with("VQP_"), "{c}");
        }
        // SAFETY: as above.
        let s = unsafe { std::ffi::CStr::from_ptr(vqp_status_str(99)) };
        assert_eq!(s.to_str().unwrap(), "unknown vqp status");
    }

    #[test]
    fn data_path_details_are_formatted_when_asked() {
        assert_eq!(guard(|| Err(PostSendError::Full.into())), VQP_ERR_FULL);
        assert!(last_message().contains("full"), "{}", last_message());
        let mut buf = [0 as c_char; 8];
        // SAFETY: buf has 8 bytes.
        let n = unsafe { vqp_last_error_message(buf.as_mut_ptr(), buf.len()) };
        assert!(n > 7);
        assert_eq!(buf[7], 0);
    }
}
