//! librdmacm, loaded at run time as libibverbs is: a table of the `rdma_*` functions
//! vqp-host connects with, resolved once by name and version (`RDMACM_1.0`, as
//! rdma-core's `librdmacm.map` exports them), and the `dlopen` handle that keeps them
//! valid. Nothing links against librdmacm: where it is absent, [`RdmaCm::load`] is an
//! [`Error::RdmaCmLibrary`] and the card exchange still
//! works.

use core::ffi::{c_char, c_int, c_uint, c_void};
use std::path::Path;
use std::sync::Arc;

use super::dl::Library;
use crate::error::{Error, Result};
use crate::sys::cm::{rdma_cm_event, rdma_cm_id, rdma_conn_param, rdma_event_channel};
use crate::sys::ibv_qp_attr;

/// The environment variable naming the librdmacm to load instead of `librdmacm.so.1`.
pub const ENV_PATH: &str = "VQP_RDMACM_PATH";

/// The library [`RdmaCm::load`] opens by default.
pub const DEFAULT_LIBRARY: &str = "librdmacm.so.1";

macro_rules! cm_table {
    ($($(#[$doc:meta])* $field:ident: fn($($arg:ty),* $(,)?) $(-> $ret:ty)?;)+) => {
        /// The librdmacm functions vqp-host calls, with `rdma_cma.h`'s prototypes.
        #[derive(Clone, Copy, Debug)]
        pub struct CmTable {
            $($(#[$doc])* pub $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)+
        }

        /// Resolves every entry from `lib`; the first missing symbol is the error.
        ///
        /// # Safety
        /// `lib` must be a librdmacm: each symbol found under these names must have the
        /// C prototype declared for it.
        unsafe fn resolve(lib: &Library) -> Result<CmTable> {
            Ok(CmTable {
                $(
                    $field: {
                        let p = lib
                            .symbol(concat!(stringify!($field), "\0"), "RDMACM_1.0\0")
                            .map_err(|_| Error::RdmaCmLibrary {
                                path: lib.path().to_string(),
                                reason: concat!("it does not export ", stringify!($field))
                                    .to_string(),
                            })?;
                        // SAFETY: a non-null code address exported under this name by
                        // a librdmacm, which has this prototype (the caller's
                        // contract); data and function pointers have one size here.
                        unsafe {
                            core::mem::transmute::<
                                *mut c_void,
                                unsafe extern "C" fn($($arg),*) $(-> $ret)?,
                            >(p.as_ptr())
                        }
                    },
                )+
            })
        }
    };
}

cm_table! {
    /// `rdma_create_event_channel()`.
    rdma_create_event_channel: fn() -> *mut rdma_event_channel;
    /// `rdma_destroy_event_channel(channel)`.
    rdma_destroy_event_channel: fn(*mut rdma_event_channel);
    /// `rdma_create_id(channel, &id, context, port space)`.
    rdma_create_id: fn(*mut rdma_event_channel, *mut *mut rdma_cm_id, *mut c_void, c_uint) -> c_int;
    /// `rdma_destroy_id(id)`.
    rdma_destroy_id: fn(*mut rdma_cm_id) -> c_int;
    /// `rdma_bind_addr(id, address)`.
    rdma_bind_addr: fn(*mut rdma_cm_id, *mut libc::sockaddr) -> c_int;
    /// `rdma_listen(id, backlog)`.
    rdma_listen: fn(*mut rdma_cm_id, c_int) -> c_int;
    /// `rdma_resolve_addr(id, source, destination, timeout in ms)`.
    rdma_resolve_addr: fn(*mut rdma_cm_id, *mut libc::sockaddr, *mut libc::sockaddr, c_int) -> c_int;
    /// `rdma_resolve_route(id, timeout in ms)`.
    rdma_resolve_route: fn(*mut rdma_cm_id, c_int) -> c_int;
    /// `rdma_connect(id, parameters)`.
    rdma_connect: fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int;
    /// `rdma_accept(id, parameters)`.
    rdma_accept: fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int;
    /// `rdma_reject(id, private data, its length)`.
    rdma_reject: fn(*mut rdma_cm_id, *const c_void, u8) -> c_int;
    /// `rdma_establish(id)`: the active side of a program that moves its own QPs.
    rdma_establish: fn(*mut rdma_cm_id) -> c_int;
    /// `rdma_disconnect(id)`.
    rdma_disconnect: fn(*mut rdma_cm_id) -> c_int;
    /// `rdma_init_qp_attr(id, attributes, mask)`: the attributes of the QP's next state.
    rdma_init_qp_attr: fn(*mut rdma_cm_id, *mut ibv_qp_attr, *mut c_int) -> c_int;
    /// `rdma_get_cm_event(channel, &event)`.
    rdma_get_cm_event: fn(*mut rdma_event_channel, *mut *mut rdma_cm_event) -> c_int;
    /// `rdma_ack_cm_event(event)`.
    rdma_ack_cm_event: fn(*mut rdma_cm_event) -> c_int;
    /// `rdma_event_str(event type)`.
    rdma_event_str: fn(c_uint) -> *const c_char;
}

/// A loaded librdmacm: the function table and the handle that keeps it valid. Cheap to
/// clone; everything made through it holds a clone.
#[derive(Clone, Debug)]
pub struct RdmaCm {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    table: CmTable,
    lib: Library,
}

impl RdmaCm {
    /// Loads librdmacm: the file named by `VQP_RDMACM_PATH` if that is set and not
    /// empty, else `librdmacm.so.1` (under `softverbs run`, softverbs' own).
    ///
    /// # Errors
    /// [`Error::RdmaCmLibrary`] with the path tried and
    /// `dlerror`'s text, or the first function the library lacks.
    pub fn load() -> Result<RdmaCm> {
        match std::env::var_os(ENV_PATH) {
            // SAFETY: the operator named this library as a librdmacm (a deployment
            // decision, like `VQP_IBVERBS_PATH`); it is resolved by librdmacm's names.
            Some(path) if !path.is_empty() => unsafe { RdmaCm::load_from(Path::new(&path)) },
            // SAFETY: the system's (or softverbs') librdmacm, whose exports have the
            // prototypes the table declares.
            _ => unsafe { RdmaCm::load_from(Path::new(DEFAULT_LIBRARY)) },
        }
    }

    /// `dlopen`s the library at `path` and resolves every function of [`CmTable`].
    ///
    /// # Safety
    /// Loading runs the library's initialisers, and its exports under the librdmacm
    /// names are then called as librdmacm: it must implement that ABI faithfully.
    ///
    /// # Errors
    /// As [`RdmaCm::load`].
    pub unsafe fn load_from(path: &Path) -> Result<RdmaCm> {
        // SAFETY: forwarded from this function's contract.
        let lib = unsafe { Library::open(path) }.map_err(|e| match e {
            Error::LibraryNotFound { path, reason } => Error::RdmaCmLibrary { path, reason },
            other => other,
        })?;
        // SAFETY: the caller vouches that `lib` is a librdmacm.
        let table = unsafe { resolve(&lib) }?;
        Ok(RdmaCm {
            shared: Arc::new(Shared { table, lib }),
        })
    }

    /// The function table.
    pub fn table(&self) -> &CmTable {
        &self.shared.table
    }

    /// The path the library was opened with.
    pub fn library_path(&self) -> &str {
        self.shared.lib.path()
    }

    /// The name librdmacm gives an event type (`rdma_event_str`), e.g.
    /// `RDMA_CM_EVENT_ESTABLISHED`.
    pub fn event_str(&self, event: c_uint) -> String {
        // SAFETY: `rdma_event_str` takes any value and returns a static string (its
        // "UNKNOWN EVENT" for values it does not know).
        let p = unsafe { (self.table().rdma_event_str)(event) };
        if p.is_null() {
            return format!("event {event}");
        }
        // SAFETY: a non-null result is a NUL-terminated static string.
        unsafe { core::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }
}
