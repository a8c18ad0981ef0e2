//! The errors of the UCX layer: UCP's status codes, and [`Error`], which also carries
//! the failure to load the library ([`LoadError`], in the parent, which `sys` uses too).

use std::fmt;

use super::sys;
use super::LoadError;

/// A UCP status code other than `UCS_OK`, named as `ucs_status_string` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status(pub i8);

impl Status {
    /// The peer is gone or cannot be reached: the connection was refused, reset or timed
    /// out (what a verbs requester turns into `IBV_WC_RETRY_EXC_ERR`).
    pub fn is_peer_failure(self) -> bool {
        matches!(
            self.0,
            sys::UCS_ERR_UNREACHABLE
                | sys::UCS_ERR_CONNECTION_RESET
                | sys::UCS_ERR_NOT_CONNECTED
                | sys::UCS_ERR_REJECTED
                | sys::UCS_ERR_TIMED_OUT
                | sys::UCS_ERR_IO_ERROR
        ) || (-89..=-40).contains(&self.0)
    }

    /// The operation was cancelled (its endpoint closed first).
    pub fn is_canceled(self) -> bool {
        self.0 == sys::UCS_ERR_CANCELED
    }

    /// The resource is busy: for a listener, its address is in use.
    pub fn is_busy(self) -> bool {
        self.0 == sys::UCS_ERR_BUSY
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match sys::Ucp::get() {
            Ok(ucp) => write!(f, "{} (UCS status {})", ucp.status_text(self.0), self.0),
            Err(_) => write!(f, "UCS status {}", self.0),
        }
    }
}

/// An error of the UCX layer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// UCP is not loaded.
    Load(LoadError),
    /// A UCP call failed.
    Call {
        /// The function.
        call: &'static str,
        /// Its status.
        status: Status,
    },
    /// The endpoint failed: its peer died, reset the connection or never answered. The
    /// status is the one UCP's error callback gave.
    EndpointFailed(Status),
    /// The endpoint, listener or request named does not exist (closed already).
    NoSuchObject,
    /// An argument out of range (a header longer than [`super::MAX_HEADER`], an active
    /// message id past [`super::MAX_AM_ID`], an address that is not IPv4 or IPv6).
    Invalid(&'static str),
    /// A receive handler panicked; the message was dropped.
    HandlerPanicked,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Load(e) => e.fmt(f),
            Error::Call { call, status } => write!(f, "{call} failed: {status}"),
            Error::EndpointFailed(s) => write!(f, "the UCX endpoint failed: {s}"),
            Error::NoSuchObject => f.write_str("no such UCX endpoint, listener or request"),
            Error::Invalid(what) => write!(f, "invalid argument: {what}"),
            Error::HandlerPanicked => f.write_str("an active message handler panicked"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Load(e) => Some(e),
            _ => None,
        }
    }
}

impl From<LoadError> for Error {
    fn from(e: LoadError) -> Self {
        Error::Load(e)
    }
}

/// `Ok` for `UCS_OK`, else the call's error.
pub(crate) fn check(call: &'static str, status: i8) -> Result<(), Error> {
    if status == sys::UCS_OK {
        Ok(())
    } else {
        Err(Error::Call {
            call,
            status: Status(status),
        })
    }
}
