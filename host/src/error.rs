//! The crate's error type.

use std::fmt;
use std::io;
use std::time::Duration;

use vqp_core::{BuildError, CqError, RestoreError};

use crate::card::CardError;
use crate::enums::WcStatus;
use crate::failback::FailBackError;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong between us and libibverbs.
///
/// Control-path failures carry the verb's name and the `errno` it reported (as the
/// [`source`](std::error::Error::source)); completion failures carry the status as
/// `ibv_wc_status_str` prints it. Nothing the library or a device returns makes this
/// crate panic: it becomes one of these values.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The verbs library could not be loaded.
    LibraryNotFound {
        /// The file name or path given to `dlopen`.
        path: String,
        /// `dlerror()`'s text.
        reason: String,
    },
    /// The verbs library lacks a function we need.
    SymbolMissing {
        /// The function's name, e.g. `ibv_create_qp`.
        symbol: &'static str,
        /// The library it was looked up in.
        library: String,
    },
    /// The connection-manager library (librdmacm) could not be loaded, or lacks a
    /// function we need.
    RdmaCmLibrary {
        /// The file name or path given to `dlopen`.
        path: String,
        /// `dlerror()`'s text, or the function it lacks.
        reason: String,
    },
    /// Connecting through the RDMA connection manager failed.
    RdmaCm(crate::cm::CmError),
    /// The provider's ops table lacks a data-path operation.
    OpMissing {
        /// The slot, e.g. `ops.poll_cq`.
        op: &'static str,
    },
    /// No RDMA device is present (libibverbs answered `ENOSYS`, or an empty list).
    NoDevices {
        /// The errno libibverbs set, when it set one.
        source: Option<io::Error>,
    },
    /// No device has the requested name.
    DeviceNotFound {
        /// The name asked for.
        name: String,
    },
    /// A verb returned an error.
    Verbs {
        /// The verb, e.g. `ibv_create_cq`.
        function: &'static str,
        /// The `errno` it reported.
        source: io::Error,
    },
    /// A post (`ibv_post_send` / `ibv_post_recv`) refused a request of a chain; the
    /// requests before it were posted, it and those after it were not.
    PostFailed {
        /// `ibv_post_send` or `ibv_post_recv`.
        function: &'static str,
        /// Position in the chain of the first request not posted.
        index: usize,
        /// The `errno` it reported.
        source: io::Error,
    },
    /// A work request completed with an error status.
    BadCompletion {
        /// The request's `wr_id`.
        wr_id: u64,
        /// Its status.
        status: WcStatus,
        /// The vendor syndrome.
        vendor_err: u32,
    },
    /// An argument was out of the range the verbs accept.
    InvalidArgument {
        /// What was wrong.
        what: &'static str,
    },
    /// An endpoint card could not be encoded or decoded, or the peer's does not agree
    /// with ours.
    Card(CardError),
    /// Setting up the TCP connection for the card exchange failed: binding,
    /// accepting, connecting, or setting socket options. (What the peer sends or fails
    /// to send is one of the `Peer…` variants.)
    Exchange {
        /// What was being done, e.g. `connect to the peer`.
        stage: &'static str,
        /// The I/O error.
        source: io::Error,
    },
    /// The peer did not send a whole message before its deadline
    /// ([`crate::exchange::DeadlineStream`]: one deadline for the whole message, not
    /// one per read).
    PeerTimeout {
        /// The message, e.g. `card`.
        what: &'static str,
        /// How long the whole message had.
        timeout: Duration,
        /// Bytes of it that arrived.
        got: usize,
        /// Its length in bytes, when known (a frame's includes its 4-byte length).
        expected: Option<usize>,
    },
    /// The peer closed the connection before a whole message arrived.
    PeerClosed {
        /// The message, e.g. `card`.
        what: &'static str,
        /// Bytes of it that arrived.
        got: usize,
        /// Its length in bytes, when known (a frame's includes its 4-byte length).
        expected: Option<usize>,
    },
    /// The peer announced or sent a message longer than this side accepts.
    PeerTooLong {
        /// The message, e.g. `card`.
        what: &'static str,
        /// The length it announced, when it announced one.
        len: Option<u64>,
        /// The most this side accepts, in bytes.
        limit: usize,
    },
    /// The peer sent something that is not the message expected.
    PeerMalformed {
        /// The message, e.g. `verdict`.
        what: &'static str,
        /// What was wrong with it.
        detail: String,
    },
    /// Sending a message to the peer or receiving one from it failed for a reason
    /// other than a timeout or a clean close (e.g. a reset connection).
    PeerIo {
        /// The message, e.g. `card`.
        what: &'static str,
        /// Whether this side was sending it (else receiving the peer's).
        sending: bool,
        /// The I/O error.
        source: io::Error,
    },
    /// The peer refused this side's endpoint card and said why.
    PeerRefused {
        /// The peer's reason, as it wrote it (from its point of view: its "this side"
        /// is the peer here), with control characters escaped and at most
        /// [`crate::exchange::MAX_REASON`] bytes.
        reason: String,
    },
    /// vqp-core refused the virtual QP's configuration.
    Build(BuildError),
    /// vqp-core refused to attach the virtual QP to its virtual CQ.
    Cq(CqError),
    /// A poll thread could not be started or stopped.
    Poller {
        /// What went wrong.
        what: &'static str,
    },
    /// A fail-back message could not be taken, or the peer does not speak fail-back.
    FailBack(FailBackError),
    /// vqp-core refused a replacement data QP.
    Restore(RestoreError),
}

impl From<FailBackError> for Error {
    fn from(e: FailBackError) -> Self {
        Error::FailBack(e)
    }
}

impl From<CardError> for Error {
    fn from(e: CardError) -> Self {
        Error::Card(e)
    }
}

impl From<BuildError> for Error {
    fn from(e: BuildError) -> Self {
        Error::Build(e)
    }
}

impl From<CqError> for Error {
    fn from(e: CqError) -> Self {
        Error::Cq(e)
    }
}

impl Error {
    /// A [`Error::Verbs`] from an errno value returned by a verb (positive, as rdma-core
    /// returns them); non-positive values fall back to the thread's `errno`, and to `EIO`
    /// when that is 0.
    pub(crate) fn verbs_rc(function: &'static str, rc: i32) -> Self {
        Error::Verbs {
            function,
            source: errno_error(rc),
        }
    }

    /// A [`Error::Verbs`] from the thread's `errno` (after a verb returned null).
    pub(crate) fn verbs_errno(function: &'static str) -> Self {
        Error::Verbs {
            function,
            source: last_errno(),
        }
    }

    /// The errno of a [`Error::Verbs`] or [`Error::PostFailed`], if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Verbs { source, .. }
            | Error::PostFailed { source, .. }
            | Error::Exchange { source, .. }
            | Error::PeerIo { source, .. } => source.raw_os_error(),
            Error::NoDevices {
                source: Some(source),
            } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// An `io::Error` for a verb's return code: positive codes are errno values; otherwise
/// the thread's errno, or `EIO` when the library left it at 0.
pub(crate) fn errno_error(rc: i32) -> io::Error {
    if rc > 0 {
        io::Error::from_raw_os_error(rc)
    } else {
        last_errno()
    }
}

/// The thread's `errno` as an `io::Error`, `EIO` when it is 0.
pub(crate) fn last_errno() -> io::Error {
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(0) | None => io::Error::from_raw_os_error(libc::EIO),
        Some(_) => err,
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::LibraryNotFound { path, reason } => {
                write!(f, "cannot load the verbs library {path:?}: {reason}")
            }
            Error::SymbolMissing { symbol, library } => {
                write!(f, "the verbs library {library:?} does not export {symbol}")
            }
            Error::RdmaCmLibrary { path, reason } => {
                write!(f, "cannot use the RDMA-CM library {path:?}: {reason}")
            }
            Error::RdmaCm(e) => write!(f, "connecting through the RDMA-CM: {e}"),
            Error::OpMissing { op } => {
                write!(f, "the RDMA provider does not implement {op}")
            }
            Error::NoDevices { source: None } => f.write_str("no RDMA devices found"),
            Error::NoDevices { source: Some(err) } => {
                write!(f, "no RDMA devices found ({err})")
            }
            Error::DeviceNotFound { name } => write!(f, "no RDMA device named {name:?}"),
            Error::Verbs { function, source } => write!(f, "{function} failed: {source}"),
            Error::PostFailed {
                function,
                index,
                source,
            } => write!(f, "{function} failed at work request {index} of the chain: {source}"),
            Error::BadCompletion {
                wr_id,
                status,
                vendor_err,
            } => write!(
                f,
                "work request {wr_id:#x} completed with error: {status} (status {}, vendor error {vendor_err:#x})",
                status.as_raw()
            ),
            Error::InvalidArgument { what } => write!(f, "invalid argument: {what}"),
            Error::Card(e) => write!(f, "endpoint card: {e}"),
            Error::FailBack(e) => write!(f, "fail-back: {e}"),
            Error::Restore(e) => write!(f, "fail-back: {e}"),
            Error::Exchange { stage, source } => {
                write!(f, "endpoint exchange failed to {stage}: {source}")
            }
            Error::PeerTimeout {
                what,
                timeout,
                got: 0,
                ..
            } => write!(f, "no {what} from the peer within {}", Secs(*timeout)),
            Error::PeerTimeout {
                what,
                timeout,
                got,
                expected,
            } => write!(
                f,
                "no whole {what} from the peer within {}: {}",
                Secs(*timeout),
                Progress(*got, *expected)
            ),
            Error::PeerClosed { what, got: 0, .. } => {
                write!(f, "the peer closed the connection before sending its {what}")
            }
            Error::PeerClosed {
                what,
                got,
                expected: Some(n),
            } => write!(
                f,
                "the peer closed the connection after {got} of {n} bytes of its {what}"
            ),
            Error::PeerClosed {
                what,
                got,
                expected: None,
            } => write!(
                f,
                "the peer closed the connection after {got} bytes of its {what}"
            ),
            Error::PeerTooLong {
                what,
                len: Some(len),
                limit,
            } => write!(
                f,
                "the peer announced a {len}-byte {what}; at most {limit} bytes are accepted"
            ),
            Error::PeerTooLong {
                what,
                len: None,
                limit,
            } => write!(f, "the peer's {what} is longer than {limit} bytes"),
            Error::PeerMalformed { what, detail } => {
                write!(f, "the peer's {what} is malformed: {detail}")
            }
            Error::PeerIo {
                what,
                sending: true,
                source,
            } => write!(f, "sending this side's {what} to the peer failed: {source}"),
            Error::PeerIo {
                what,
                sending: false,
                source,
            } => write!(f, "receiving the peer's {what} failed: {source}"),
            Error::PeerRefused { reason } => write!(
                f,
                "the peer refused this side's endpoint card, saying: \"{reason}\" \
                 (its \"peer\" is this side)"
            ),
            Error::Build(e) => write!(f, "virtual QP configuration refused: {e}"),
            Error::Cq(e) => write!(f, "virtual CQ refused the virtual QP: {e}"),
            Error::Poller { what } => write!(f, "poll thread: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Verbs { source, .. }
            | Error::PostFailed { source, .. }
            | Error::Exchange { source, .. }
            | Error::PeerIo { source, .. } => Some(source),
            Error::Card(e) => Some(e),
            Error::RdmaCm(e) => Some(e),
            Error::FailBack(e) => Some(e),
            Error::Restore(e) => Some(e),
            Error::Build(e) => Some(e),
            Error::Cq(e) => Some(e),
            Error::NoDevices {
                source: Some(source),
            } => Some(source),
            _ => None,
        }
    }
}

/// A duration as people write it: `10 s`, `300 ms`, `1.5 s`, `250 µs`.
pub(crate) struct Secs(pub(crate) Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() == 0 {
            write!(f, "{} s", d.as_secs())
        } else if d >= Duration::from_secs(1) {
            write!(f, "{} s", d.as_secs_f64())
        } else if d.subsec_nanos() % 1_000_000 == 0 {
            write!(f, "{} ms", d.subsec_millis())
        } else if d.subsec_nanos() % 1_000 == 0 {
            write!(f, "{} µs", d.subsec_micros())
        } else {
            write!(f, "{d:?}")
        }
    }
}

/// How much of a message arrived: `37 of 412 bytes arrived` or `5 bytes arrived`.
struct Progress(usize, Option<usize>);

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(n) => write!(f, "{} of {n} bytes arrived", self.0),
            None => write!(f, "{} bytes arrived", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn display_texts() {
        let e = Error::NoDevices { source: None };
        assert_eq!(e.to_string(), "no RDMA devices found");
        let e = Error::NoDevices {
            source: Some(io::Error::from_raw_os_error(libc::ENOSYS)),
        };
        assert!(e.to_string().starts_with("no RDMA devices found ("), "{e}");
        assert!(e.source().is_some());

        let e = Error::verbs_rc("ibv_modify_qp", libc::EINVAL);
        assert!(
            e.to_string()
                .starts_with("ibv_modify_qp failed: Invalid argument"),
            "{e}"
        );
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert!(e.source().is_some());

        let e = Error::BadCompletion {
            wr_id: 7,
            status: WcStatus::RemAccessErr,
            vendor_err: 0x88,
        };
        assert_eq!(
            e.to_string(),
            "work request 0x7 completed with error: remote access error (status 10, vendor error 0x88)"
        );
        assert!(e.source().is_none());

        let e = Error::PeerTimeout {
            what: "card",
            timeout: Duration::from_secs(10),
            got: 0,
            expected: None,
        };
        assert_eq!(e.to_string(), "no card from the peer within 10 s");
        let e = Error::PeerTimeout {
            what: "card",
            timeout: Duration::from_millis(300),
            got: 37,
            expected: Some(412),
        };
        assert_eq!(
            e.to_string(),
            "no whole card from the peer within 300 ms: 37 of 412 bytes arrived"
        );
        assert_eq!(Secs(Duration::from_millis(1500)).to_string(), "1.5 s");
        assert_eq!(Secs(Duration::from_micros(250)).to_string(), "250 µs");
        let e = Error::PeerClosed {
            what: "card",
            got: 37,
            expected: Some(412),
        };
        assert_eq!(
            e.to_string(),
            "the peer closed the connection after 37 of 412 bytes of its card"
        );
        let e = Error::PeerClosed {
            what: "card",
            got: 0,
            expected: None,
        };
        assert_eq!(
            e.to_string(),
            "the peer closed the connection before sending its card"
        );
        let e = Error::PeerTooLong {
            what: "parameter line",
            len: None,
            limit: 512,
        };
        assert_eq!(
            e.to_string(),
            "the peer's parameter line is longer than 512 bytes"
        );

        let e = Error::SymbolMissing {
            symbol: "ibv_create_qp",
            library: "libc.so.6".into(),
        };
        assert!(e.to_string().contains("ibv_create_qp"));
    }
}
