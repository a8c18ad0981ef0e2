//! vqp-capi: the C API of vqp — `libvqp.so.0`, `libvqp.a`, `vqp.pc`, the generated
//! header `include/vqp.h` and the C++17 wrapper `include/vqp.hpp`.
//!
//! ```text
//!  C / C++ program ── vqp.h / vqp.hpp
//!        │ opaque 64-bit handles, caller-owned structs and arrays
//!  ┌─────▼──────────────────────────────────────────────────────────┐
//!  │ vqp-capi  status (codes, last error, catch_unwind) · table      │
//!  │           (handles → objects) · device · mr · endpoint · data   │
//!  └─────┬──────────────────────────────────────────────────────────┘
//!        ▼ vqp-host (Endpoint, Connected, exchange) ─► vqp-core
//! ```
//!
//! # Choices
//! - **Capacities.** vqp's types take their capacities as const generics; C sees one
//!   instantiation: the defaults of `vqp_core::caps` (8 data QPs, 128 WQEs per QP,
//!   512 requests per direction, a reorder window of 1024, a poll batch of 32) with
//!   `DEVS` = 4, the most devices a request's keys can name, so that one library
//!   serves single- and multi-device endpoints. A device slot the endpoint does not
//!   use costs nothing on the data path (the virtual CQ polls only the CQs it has).
//!   They are in the header as `VQP_MAX_DATA_QPS`, `VQP_MAX_WQES`, `VQP_MAX_SLOTS`,
//!   `VQP_WINDOW`, `VQP_MAX_DEVICES`, `VQP_POLL_BATCH`.
//! - **Handles** are 64-bit values in one-field structs, one struct type per object,
//!   looked up in a table with a generation per slot: a destroyed handle is
//!   `VQP_ERR_STALE_HANDLE`, never a use-after-free (see `table`).
//! - **Errors** are `vqp_status` codes; `vqp_status_str` names one,
//!   `vqp_last_error_message` gives the last failure's text on the calling thread.
//!   Every entry point runs under `catch_unwind`: no panic reaches C.
//! - **The data path** (`vqp_post_send`, `vqp_post_recv`, `vqp_poll`) takes the
//!   caller's structs and arrays, allocates nothing and takes no lock: a handle lookup
//!   is an index and one compare, a send request is read in place, and completions
//!   are written into the caller's array.
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
// The C names are the API.
#![allow(non_camel_case_types)]

pub mod cm;
pub mod data;
pub mod device;
pub mod endpoint;
pub mod status;
mod table;
pub mod types;

pub use status::vqp_status;

/// The major version: changes with every incompatible change of the ABI (the SONAME
/// is `libvqp.so.<major>`).
pub const VQP_VERSION_MAJOR: u32 = 0;
/// The minor version: grows when the ABI gains something (a function, a status code, a
/// field behind `struct_size`) without breaking what was there, so that a program built
/// against an older minor runs unchanged; `vqp_version() >= VQP_VERSION` (its
/// header's) tells a program the library has every call it was built with. Minor 2
/// added connecting through RDMA-CM.
pub const VQP_VERSION_MINOR: u32 = 2;
/// The patch version: fixes only.
pub const VQP_VERSION_PATCH: u32 = 0;
/// The version as one number, `major * 10000 + minor * 100 + patch`, for `#if`.
pub const VQP_VERSION: u32 =
    VQP_VERSION_MAJOR * 10000 + VQP_VERSION_MINOR * 100 + VQP_VERSION_PATCH;

const _: () = {
    // The header's version is the crate's (capi/Cargo.toml's own, the ABI's).
    assert!(konst_eq(env!("CARGO_PKG_VERSION_MAJOR"), VQP_VERSION_MAJOR));
    assert!(konst_eq(env!("CARGO_PKG_VERSION_MINOR"), VQP_VERSION_MINOR));
    assert!(konst_eq(env!("CARGO_PKG_VERSION_PATCH"), VQP_VERSION_PATCH));
};

/// Whether the decimal string `s` is `n` (a compile-time check of the version).
const fn konst_eq(s: &str, n: u32) -> bool {
    let b = s.as_bytes();
    let mut v: u32 = 0;
    let mut i = 0;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v == n
}

/// The library's version at run time, as [`VQP_VERSION`]: compare it with the
/// header's macro to catch a program running on another library than it was built
/// with.
///
/// Thread-safety: any thread, any time.
#[no_mangle]
pub extern "C" fn vqp_version() -> u32 {
    VQP_VERSION
}

/// The library's version as a static string, e.g. `"0.2.0"`.
///
/// Thread-safety: any thread, any time.
#[no_mangle]
pub extern "C" fn vqp_version_string() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

pub mod mr;
pub mod poller;
pub mod recovery;
