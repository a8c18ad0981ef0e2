//! The C declarations of UCP 1.13 (`<ucp/api/ucp.h>`, `<ucs/type/status.h>`) that
//! softverbs uses — handle types, parameter structs, constants — and [`Ucp`], the table
//! of its functions, filled once with `dlopen("libucp.so.0")` and `dlsym`.
//!
//! Every struct is laid out as the header lays it out, field for field (trailing fields
//! we do not set included, so that UCP never reads past our copy); `tests/ucx_h.rs`
//! compares sizes, offsets and constant values with the installed header when
//! `libucx-dev` is there. Only what is named here is used.
#![allow(non_camel_case_types, missing_docs)]

use core::ffi::{c_char, c_int, c_uint, c_void};
use std::ffi::CStr;
use std::sync::OnceLock;

use super::LoadError;

/// `ucs_status_t`: a packed enum, one signed byte.
pub type ucs_status_t = i8;
/// `ucs_status_ptr_t`: a request, `NULL` (done) or an error status cast to a pointer.
pub type ucs_status_ptr_t = *mut c_void;
pub type ucs_thread_mode_t = c_uint;
pub type ucs_memory_type_t = c_uint;
pub type ucp_datatype_t = u64;
pub type ucp_err_handling_mode_t = c_uint;

/// Opaque UCP objects, known only by pointer.
#[repr(C)]
pub struct ucp_context {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ucp_config_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ucp_worker {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ucp_ep {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ucp_listener {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ucp_conn_request {
    _p: [u8; 0],
}
pub type ucp_context_h = *mut ucp_context;
pub type ucp_worker_h = *mut ucp_worker;
pub type ucp_ep_h = *mut ucp_ep;
pub type ucp_listener_h = *mut ucp_listener;
pub type ucp_conn_request_h = *mut ucp_conn_request;

pub const UCS_OK: ucs_status_t = 0;
pub const UCS_INPROGRESS: ucs_status_t = 1;
pub const UCS_ERR_NO_MESSAGE: ucs_status_t = -1;
pub const UCS_ERR_NO_RESOURCE: ucs_status_t = -2;
pub const UCS_ERR_IO_ERROR: ucs_status_t = -3;
pub const UCS_ERR_NO_MEMORY: ucs_status_t = -4;
pub const UCS_ERR_INVALID_PARAM: ucs_status_t = -5;
pub const UCS_ERR_UNREACHABLE: ucs_status_t = -6;
pub const UCS_ERR_INVALID_ADDR: ucs_status_t = -7;
pub const UCS_ERR_MESSAGE_TRUNCATED: ucs_status_t = -9;
pub const UCS_ERR_BUSY: ucs_status_t = -15;
pub const UCS_ERR_CANCELED: ucs_status_t = -16;
pub const UCS_ERR_TIMED_OUT: ucs_status_t = -20;
pub const UCS_ERR_REJECTED: ucs_status_t = -23;
pub const UCS_ERR_NOT_CONNECTED: ucs_status_t = -24;
pub const UCS_ERR_CONNECTION_RESET: ucs_status_t = -25;
pub const UCS_ERR_ENDPOINT_TIMEOUT: ucs_status_t = -80;
/// Status pointers at or above `(uintptr_t)UCS_ERR_LAST` are errors (`UCS_PTR_IS_ERR`).
pub const UCS_ERR_LAST: ucs_status_t = -100;

pub const UCS_THREAD_MODE_SINGLE: ucs_thread_mode_t = 0;
pub const UCS_THREAD_MODE_SERIALIZED: ucs_thread_mode_t = 1;
pub const UCS_MEMORY_TYPE_HOST: ucs_memory_type_t = 0;

pub const UCP_API_MAJOR: c_uint = 1;
pub const UCP_API_MINOR: c_uint = 13;

pub const UCP_PARAM_FIELD_FEATURES: u64 = 1 << 0;
pub const UCP_PARAM_FIELD_NAME: u64 = 1 << 8;
pub const UCP_FEATURE_AM: u64 = 1 << 6;
pub const UCP_FEATURE_WAKEUP: u64 = 1 << 4;

pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = 1 << 0;

pub const UCP_LISTENER_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 0;
pub const UCP_LISTENER_PARAM_FIELD_CONN_HANDLER: u64 = 1 << 2;
pub const UCP_LISTENER_ATTR_FIELD_SOCKADDR: u64 = 1 << 0;
pub const UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR: u64 = 1 << 0;

pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = 1 << 1;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLER: u64 = 1 << 2;
pub const UCP_EP_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 4;
pub const UCP_EP_PARAM_FIELD_FLAGS: u64 = 1 << 5;
pub const UCP_EP_PARAM_FIELD_CONN_REQUEST: u64 = 1 << 6;
pub const UCP_EP_PARAMS_FLAGS_CLIENT_SERVER: c_uint = 1 << 0;
pub const UCP_ERR_HANDLING_MODE_PEER: ucp_err_handling_mode_t = 1;
pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1 << 0;

pub const UCP_DATATYPE_CONTIG: u64 = 0;
pub const UCP_DATATYPE_IOV: u64 = 2;
pub const UCP_DATATYPE_SHIFT: u64 = 3;

pub const UCP_AM_FLAG_WHOLE_MSG: u32 = 1 << 0;
pub const UCP_AM_SEND_FLAG_REPLY: u32 = 1 << 0;
pub const UCP_AM_RECV_ATTR_FIELD_REPLY_EP: u64 = 1 << 0;
pub const UCP_AM_RECV_ATTR_FLAG_DATA: u64 = 1 << 16;
pub const UCP_AM_RECV_ATTR_FLAG_RNDV: u64 = 1 << 17;
pub const UCP_AM_HANDLER_PARAM_FIELD_ID: u64 = 1 << 0;
pub const UCP_AM_HANDLER_PARAM_FIELD_FLAGS: u64 = 1 << 1;
pub const UCP_AM_HANDLER_PARAM_FIELD_CB: u64 = 1 << 2;
pub const UCP_AM_HANDLER_PARAM_FIELD_ARG: u64 = 1 << 3;

pub const UCP_OP_ATTR_FIELD_CALLBACK: u32 = 1 << 1;
pub const UCP_OP_ATTR_FIELD_USER_DATA: u32 = 1 << 2;
pub const UCP_OP_ATTR_FIELD_DATATYPE: u32 = 1 << 3;
pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 1 << 4;

/// `ucp_dt_make_contig(1)`: a byte buffer.
pub const UCP_DATATYPE_BYTES: ucp_datatype_t = (1 << UCP_DATATYPE_SHIFT) | UCP_DATATYPE_CONTIG;

pub type ucp_request_init_callback_t = Option<unsafe extern "C" fn(*mut c_void)>;
pub type ucp_send_nbx_callback_t = Option<
    unsafe extern "C" fn(request: *mut c_void, status: ucs_status_t, user_data: *mut c_void),
>;
pub type ucp_am_recv_data_nbx_callback_t = Option<
    unsafe extern "C" fn(
        request: *mut c_void,
        status: ucs_status_t,
        length: usize,
        user_data: *mut c_void,
    ),
>;
pub type ucp_err_handler_cb_t =
    Option<unsafe extern "C" fn(arg: *mut c_void, ep: ucp_ep_h, status: ucs_status_t)>;
pub type ucp_listener_conn_callback_t =
    Option<unsafe extern "C" fn(conn_request: ucp_conn_request_h, arg: *mut c_void)>;
pub type ucp_am_recv_callback_t = Option<
    unsafe extern "C" fn(
        arg: *mut c_void,
        header: *const c_void,
        header_length: usize,
        data: *mut c_void,
        length: usize,
        param: *const ucp_am_recv_param_t,
    ) -> ucs_status_t,
>;

#[repr(C)]
pub struct ucp_params_t {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: ucp_request_init_callback_t,
    pub request_cleanup: ucp_request_init_callback_t,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
}

/// `ucs_cpu_set_t`: 1024 bits.
#[repr(C)]
pub struct ucs_cpu_set_t {
    pub ucs_bits: [u64; 16],
}

#[repr(C)]
pub struct ucp_worker_params_t {
    pub field_mask: u64,
    pub thread_mode: ucs_thread_mode_t,
    pub cpu_mask: ucs_cpu_set_t,
    pub events: c_uint,
    pub user_data: *mut c_void,
    pub event_fd: c_int,
    pub flags: u64,
    pub name: *const c_char,
    pub am_alignment: usize,
    pub client_id: u64,
}

/// `ucp_dt_iov_t`: one segment of a scatter or gather list.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ucp_dt_iov_t {
    pub buffer: *mut c_void,
    pub length: usize,
}

/// `ucs_sock_addr_t`.
#[repr(C)]
pub struct ucs_sock_addr_t {
    pub addr: *const libc::sockaddr,
    pub addrlen: libc::socklen_t,
}

#[repr(C)]
pub struct ucp_err_handler_t {
    pub cb: ucp_err_handler_cb_t,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_listener_conn_handler_t {
    pub cb: ucp_listener_conn_callback_t,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_listener_params_t {
    pub field_mask: u64,
    pub sockaddr: ucs_sock_addr_t,
    /// `ucp_listener_accept_handler_t` (a callback and its argument), unused.
    pub accept_handler: [*mut c_void; 2],
    pub conn_handler: ucp_listener_conn_handler_t,
}

#[repr(C)]
pub struct ucp_listener_attr_t {
    pub field_mask: u64,
    pub sockaddr: libc::sockaddr_storage,
}

#[repr(C)]
pub struct ucp_conn_request_attr_t {
    pub field_mask: u64,
    pub client_address: libc::sockaddr_storage,
    pub client_id: u64,
}

#[repr(C)]
pub struct ucp_ep_params_t {
    pub field_mask: u64,
    pub address: *const c_void,
    pub err_mode: ucp_err_handling_mode_t,
    pub err_handler: ucp_err_handler_t,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub sockaddr: ucs_sock_addr_t,
    pub conn_request: ucp_conn_request_h,
    pub name: *const c_char,
    pub local_sockaddr: ucs_sock_addr_t,
}

/// The union `cb` of `ucp_request_param_t`: one pointer.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ucp_request_param_cb {
    pub send: ucp_send_nbx_callback_t,
    pub recv_am: ucp_am_recv_data_nbx_callback_t,
}

#[repr(C)]
pub struct ucp_request_param_t {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb: ucp_request_param_cb,
    pub datatype: ucp_datatype_t,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: ucs_memory_type_t,
    /// The union `recv_info`: one pointer.
    pub recv_info: *mut c_void,
    pub memh: *mut c_void,
}

#[repr(C)]
pub struct ucp_am_handler_param_t {
    pub field_mask: u64,
    pub id: c_uint,
    pub flags: u32,
    pub cb: ucp_am_recv_callback_t,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_am_recv_param_t {
    pub recv_attr: u64,
    pub reply_ep: ucp_ep_h,
}

impl ucp_request_param_t {
    /// A parameter block with nothing set.
    pub fn empty() -> Self {
        ucp_request_param_t {
            op_attr_mask: 0,
            flags: 0,
            request: core::ptr::null_mut(),
            cb: ucp_request_param_cb { send: None },
            datatype: 0,
            user_data: core::ptr::null_mut(),
            reply_buffer: core::ptr::null_mut(),
            memory_type: UCS_MEMORY_TYPE_HOST,
            recv_info: core::ptr::null_mut(),
            memh: core::ptr::null_mut(),
        }
    }
}

/// `UCS_PTR_IS_ERR`.
pub fn ptr_is_err(p: ucs_status_ptr_t) -> bool {
    p as usize >= UCS_ERR_LAST as isize as usize
}

/// `UCS_PTR_RAW_STATUS` of an error pointer.
pub fn ptr_status(p: ucs_status_ptr_t) -> ucs_status_t {
    p as isize as ucs_status_t
}

macro_rules! functions {
    ($( $name:ident : fn($($arg:ty),*) $(-> $ret:ty)? ;)*) => {
        /// The UCP functions softverbs calls, resolved once from `libucp.so.0`.
        pub struct Ucp {
            /// Where it was loaded from, for messages.
            pub library: String,
            $( pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
        }

        impl Ucp {
            /// Resolves every function from the open library `handle`.
            ///
            /// # Safety
            /// `handle` is a live `dlopen` handle of a UCP 1.x library, never closed.
            unsafe fn resolve(handle: *mut c_void, library: &str) -> Result<Ucp, LoadError> {
                Ok(Ucp {
                    library: library.to_string(),
                    $( $name: {
                        let name = concat!(stringify!($name), "\0");
                        // SAFETY: a live handle and a NUL-terminated name.
                        let p = unsafe { libc::dlsym(handle, name.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(LoadError::Symbol {
                                library: library.to_string(),
                                symbol: stringify!($name),
                            });
                        }
                        // SAFETY: the symbol of that name in libucp has the C type
                        // declared here (checked against ucp.h by tests/ucx_h.rs).
                        unsafe { core::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p) }
                    }, )*
                })
            }
        }

        /// Each function in [`Ucp`] with its Rust type as written here, for the header
        /// check (`tests/ucx_h.rs` spells the type in C and has the compiler compare).
        #[doc(hidden)]
        pub const FUNCTIONS: &[(&str, &str)] = &[
            $((stringify!($name), stringify!(fn($($arg),*) $(-> $ret)?))),*
        ];
    };
}

functions! {
    ucp_config_read: fn(*const c_char, *const c_char, *mut *mut ucp_config_t) -> ucs_status_t;
    ucp_config_modify: fn(*mut ucp_config_t, *const c_char, *const c_char) -> ucs_status_t;
    ucp_config_release: fn(*mut ucp_config_t);
    ucp_get_version_string: fn() -> *const c_char;
    ucp_init_version: fn(c_uint, c_uint, *const ucp_params_t, *const ucp_config_t, *mut ucp_context_h) -> ucs_status_t;
    ucp_cleanup: fn(ucp_context_h);
    ucp_worker_create: fn(ucp_context_h, *const ucp_worker_params_t, *mut ucp_worker_h) -> ucs_status_t;
    ucp_worker_destroy: fn(ucp_worker_h);
    ucp_worker_progress: fn(ucp_worker_h) -> c_uint;
    ucp_worker_get_efd: fn(ucp_worker_h, *mut c_int) -> ucs_status_t;
    ucp_worker_arm: fn(ucp_worker_h) -> ucs_status_t;
    ucp_worker_signal: fn(ucp_worker_h) -> ucs_status_t;
    ucp_worker_set_am_recv_handler: fn(ucp_worker_h, *const ucp_am_handler_param_t) -> ucs_status_t;
    ucp_listener_create: fn(ucp_worker_h, *const ucp_listener_params_t, *mut ucp_listener_h) -> ucs_status_t;
    ucp_listener_destroy: fn(ucp_listener_h);
    ucp_listener_query: fn(ucp_listener_h, *mut ucp_listener_attr_t) -> ucs_status_t;
    ucp_listener_reject: fn(ucp_listener_h, ucp_conn_request_h) -> ucs_status_t;
    ucp_conn_request_query: fn(ucp_conn_request_h, *mut ucp_conn_request_attr_t) -> ucs_status_t;
    ucp_ep_create: fn(ucp_worker_h, *const ucp_ep_params_t, *mut ucp_ep_h) -> ucs_status_t;
    ucp_ep_close_nbx: fn(ucp_ep_h, *const ucp_request_param_t) -> ucs_status_ptr_t;
    ucp_am_send_nbx: fn(ucp_ep_h, c_uint, *const c_void, usize, *const c_void, usize, *const ucp_request_param_t) -> ucs_status_ptr_t;
    ucp_am_recv_data_nbx: fn(ucp_worker_h, *mut c_void, *mut c_void, usize, *const ucp_request_param_t) -> ucs_status_ptr_t;
    ucp_am_data_release: fn(ucp_worker_h, *mut c_void);
    ucp_request_check_status: fn(*mut c_void) -> ucs_status_t;
    ucp_request_free: fn(*mut c_void);
    ucs_status_string: fn(ucs_status_t) -> *const c_char;
}

/// The library [`Ucp::get`] opens.
pub const LIBRARY: &str = "libucp.so.0";

impl Ucp {
    /// The process's UCP, loaded at the first call (`libucp.so.0`); later calls give the
    /// same table, or the same error.
    pub fn get() -> Result<&'static Ucp, LoadError> {
        static UCP: OnceLock<Result<&'static Ucp, LoadError>> = OnceLock::new();
        UCP.get_or_init(|| Ucp::load(LIBRARY)).clone()
    }

    /// Opens `library` (a file name or path) and resolves the table. The library stays
    /// loaded for the rest of the process: UCP registers handlers that outlive its
    /// objects, so it is never closed.
    pub fn load(library: &str) -> Result<&'static Ucp, LoadError> {
        let Ok(c) = std::ffi::CString::new(library) else {
            return Err(LoadError::Open {
                library: library.to_string(),
                reason: "the name contains a NUL byte".into(),
            });
        };
        // SAFETY: a NUL-terminated name; libucp's initialisers are well behaved.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(LoadError::Open {
                library: library.to_string(),
                reason: dlerror_text(),
            });
        }
        // SAFETY: a live handle, never closed.
        let ucp = unsafe { Ucp::resolve(handle, library) }?;
        Ok(Box::leak(Box::new(ucp)))
    }

    /// UCP's own version string, e.g. `1.13.1`.
    pub fn version(&self) -> String {
        // SAFETY: returns a static NUL-terminated string.
        let p = unsafe { (self.ucp_get_version_string)() };
        cstr(p)
    }

    /// `ucs_status_string(status)`.
    pub fn status_text(&self, status: ucs_status_t) -> String {
        // SAFETY: returns a static NUL-terminated string for any value.
        cstr(unsafe { (self.ucs_status_string)(status) })
    }
}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: UCP returns NUL-terminated static strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn dlerror_text() -> String {
    // SAFETY: no arguments; the result is copied out at once.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        "dlopen failed without a message".into()
    } else {
        cstr(msg)
    }
}
