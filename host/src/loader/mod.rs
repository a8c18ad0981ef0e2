//! Finding libibverbs and resolving its functions, once.
//!
//! A [`Verbs`] handle owns one [`VerbsTable`] and whatever keeps it valid (the `dlopen`
//! handle). Every object created through it holds a clone, so the library stays loaded
//! until the last object is gone.
//!
//! Where the table comes from:
//! - default build: [`Verbs::load`] `dlopen`s `libibverbs.so.1`, or the file named by the
//!   environment variable [`VQP_IBVERBS_PATH`](ENV_PATH) when it is set and not empty.
//!   Nothing links against libibverbs, so a binary runs (and reports
//!   [`Error::LibraryNotFound`](crate::Error::LibraryNotFound)) on machines without it.
//! - feature `linked`: [`Verbs::load`] uses the table filled at link time from `rdma-sys`
//!   (`Verbs::linked`), unless `VQP_IBVERBS_PATH` is set, which still wins.
//! - any build: [`Verbs::load_from`] opens an explicit path, and [`Verbs::from_table`]
//!   takes a table of in-process function pointers (a software provider's).
//!
//! librdmacm, for connecting through the RDMA connection manager, is loaded the same
//! way and only when asked for: [`cm::RdmaCm`].

pub mod cm;
mod dl;
#[cfg(feature = "linked")]
mod linked;
mod table;

use core::ffi::c_void;
use core::ptr::NonNull;
use std::ffi::{CStr, CString};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

pub use table::VerbsTable;

use crate::enums::WcStatus;
use crate::error::Result;
use dl::Library;

/// The environment variable naming the verbs library to load instead of
/// `libibverbs.so.1` (a file name searched the usual `dlopen` way, or a path).
pub const ENV_PATH: &str = "VQP_IBVERBS_PATH";

/// The library [`Verbs::load`] opens by default.
pub const DEFAULT_LIBRARY: &str = "libibverbs.so.1";

/// A loaded verbs library: the function table and what keeps it valid.
///
/// Cheap to clone (one `Arc`). `Send` and `Sync`: the table is plain function pointers to
/// libibverbs, which is thread-safe.
#[derive(Clone)]
pub struct Verbs {
    shared: Arc<Shared>,
}

struct Shared {
    table: VerbsTable,
    origin: Origin,
}

enum Origin {
    Loaded(Library),
    #[cfg(feature = "linked")]
    Linked,
    Table,
}

impl Verbs {
    /// Loads the verbs library: the file named by `VQP_IBVERBS_PATH` if that is set and
    /// not empty, else `libibverbs.so.1` (default build) or the link-time library
    /// (feature `linked`).
    ///
    /// Trusting the environment variable is a deployment decision, like
    /// `LD_LIBRARY_PATH`: whoever sets it vouches that it names a library with the
    /// libibverbs ABI.
    ///
    /// # Errors
    /// [`Error::LibraryNotFound`](crate::Error::LibraryNotFound) with the path tried and
    /// `dlerror`'s text; [`Error::SymbolMissing`](crate::Error::SymbolMissing) naming the
    /// first function the library lacks.
    pub fn load() -> Result<Verbs> {
        match std::env::var_os(ENV_PATH) {
            // SAFETY: the operator named this library as a libibverbs replacement (see
            // above); it is resolved by the same names and versions as the real one.
            Some(path) if !path.is_empty() => unsafe { Verbs::load_from(Path::new(&path)) },
            _ => Verbs::load_default(),
        }
    }

    #[cfg(not(feature = "linked"))]
    fn load_default() -> Result<Verbs> {
        // SAFETY: the system's libibverbs, whose exports have exactly the prototypes the
        // table declares.
        unsafe { Verbs::load_from(Path::new(DEFAULT_LIBRARY)) }
    }

    #[cfg(feature = "linked")]
    fn load_default() -> Result<Verbs> {
        Ok(Verbs::linked())
    }

    /// `dlopen`s the library at `path` (a file name is searched the usual `dlopen` way)
    /// and resolves every function of [`VerbsTable`] by name and version.
    ///
    /// # Safety
    /// Loading runs the library's initialisers, and the functions it exports under the
    /// libibverbs names are then called as libibverbs: the library must implement the
    /// libibverbs ABI faithfully (libibverbs itself, or a provider such as a software
    /// RDMA device built for it).
    ///
    /// # Errors
    /// As [`Verbs::load`].
    pub unsafe fn load_from(path: &Path) -> Result<Verbs> {
        // SAFETY: forwarded from this function's contract.
        let lib = unsafe { Library::open(path) }?;
        // SAFETY: the caller vouches that `lib` implements the libibverbs ABI.
        let table = unsafe { table::resolve(&lib) }?;
        Ok(Verbs {
            shared: Arc::new(Shared {
                table,
                origin: Origin::Loaded(lib),
            }),
        })
    }

    /// The libibverbs this binary was linked against (feature `linked`, via `rdma-sys`).
    #[cfg(feature = "linked")]
    pub fn linked() -> Verbs {
        Verbs {
            shared: Arc::new(Shared {
                table: table::linked(),
                origin: Origin::Linked,
            }),
        }
    }

    /// Uses a table of in-process function pointers, e.g. a software provider's.
    ///
    /// # Safety
    /// Every function in `table` must behave as the libibverbs function of the same name
    /// (same prototype, same ownership and error conventions), and the objects it returns
    /// must follow rdma-core's public struct layouts ([`crate::sys`]), including a
    /// populated `ibv_context::ops` for the data path. The functions must stay callable
    /// for as long as any clone of the returned handle or any object created through it
    /// lives.
    pub unsafe fn from_table(table: VerbsTable) -> Verbs {
        Verbs {
            shared: Arc::new(Shared {
                table,
                origin: Origin::Table,
            }),
        }
    }

    /// The resolved function table.
    #[inline]
    pub fn table(&self) -> &VerbsTable {
        &self.shared.table
    }

    /// The path the library was loaded from, when it was loaded with `dlopen`.
    pub fn library_path(&self) -> Option<&str> {
        match &self.shared.origin {
            Origin::Loaded(lib) => Some(lib.path()),
            _ => None,
        }
    }

    /// The address of `name` in the loaded library (plain `dlsym`), for symbols beyond
    /// the verbs, such as a software provider's own control functions. `None` when the
    /// library does not export it, when `name` contains a NUL byte, or when this handle
    /// was not loaded with `dlopen` ([`Verbs::from_table`], feature `linked`).
    ///
    /// The address stays valid while this handle (or a clone) lives. Calling it means
    /// casting it to the function's exact C prototype, which only the caller knows:
    /// that cast is the caller's `unsafe`.
    pub fn symbol(&self, name: &str) -> Option<NonNull<c_void>> {
        let Origin::Loaded(lib) = &self.shared.origin else {
            return None;
        };
        let c_name = CString::new(name).ok()?;
        lib.lookup(&c_name)
    }

    /// The library's own text for a completion status (`ibv_wc_status_str`). Equal to
    /// [`WcStatus::as_str`] for real libibverbs; this asks the library, which is useful
    /// to check that claim or for providers with their own wording.
    pub fn wc_status_str(&self, status: WcStatus) -> String {
        // SAFETY: `ibv_wc_status_str` accepts any value (unknown ones give "unknown").
        let p = unsafe { (self.shared.table.wc_status_str)(status.as_raw()) };
        if p.is_null() {
            return String::from("unknown");
        }
        // SAFETY: the library returns a static NUL-terminated string, valid while the
        // library is loaded, which `self` guarantees; we copy it out at once.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl fmt::Debug for Verbs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = match &self.shared.origin {
            Origin::Loaded(lib) => lib.path(),
            #[cfg(feature = "linked")]
            Origin::Linked => "<linked>",
            Origin::Table => "<in-process table>",
        };
        f.debug_struct("Verbs").field("library", &origin).finish()
    }
}
