//! A minimal `dlopen` handle: open, look up versioned symbols, close on drop.

use core::ffi::{c_char, c_void, CStr};
use core::ptr::NonNull;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{Error, Result};

/// An open shared library. Closed with `dlclose` when dropped; everything resolved from
/// it must be dropped first (the [`Verbs`](super::Verbs) handle that owns it is shared by
/// every object, so it drops last).
pub(crate) struct Library {
    handle: NonNull<c_void>,
    path: String,
}

// SAFETY: a `dlopen` handle is a process-wide token; `dlsym`/`dlvsym`/`dlclose` may be
// called on it from any thread (glibc serialises them internally).
unsafe impl Send for Library {}
// SAFETY: as above; `&Library` only permits `dlsym`/`dlvsym` lookups, which are
// thread-safe.
unsafe impl Sync for Library {}

impl Library {
    /// `dlopen(path, RTLD_NOW | RTLD_LOCAL)`.
    ///
    /// # Safety
    /// Loading a library runs its initialisers; the caller vouches that the file is a
    /// well-behaved shared library.
    pub(crate) unsafe fn open(path: &Path) -> Result<Self> {
        let shown = path.display().to_string();
        let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
            return Err(Error::LibraryNotFound {
                path: shown,
                reason: "the path contains a NUL byte".into(),
            });
        };
        // SAFETY: `c_path` is NUL-terminated and outlives the call; the caller vouches
        // for the library's initialisers.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        match NonNull::new(handle) {
            Some(handle) => Ok(Library {
                handle,
                path: shown,
            }),
            None => Err(Error::LibraryNotFound {
                path: shown,
                reason: dlerror_text(),
            }),
        }
    }

    /// The path the library was opened with.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Resolves `name` at `version` with `dlvsym`, falling back to plain `dlsym` when
    /// the library exports no such version (libraries without symbol versioning, such
    /// as a provider built without a version script).
    ///
    /// `name` and `version` must end with a NUL byte; the error names the symbol without
    /// it.
    pub(crate) fn symbol(
        &self,
        name: &'static str,
        version: &'static str,
    ) -> Result<NonNull<c_void>> {
        let printable = name.strip_suffix('\0').unwrap_or(name);
        let (Ok(c_name), Ok(c_version)) = (
            CStr::from_bytes_with_nul(name.as_bytes()),
            CStr::from_bytes_with_nul(version.as_bytes()),
        ) else {
            return Err(Error::SymbolMissing {
                symbol: printable,
                library: self.path.clone(),
            });
        };
        let versioned = self.dlvsym(c_name.as_ptr(), c_version.as_ptr());
        let found = match versioned {
            Some(p) => Some(p),
            None => {
                // SAFETY: `handle` is a live dlopen handle and `c_name` is NUL-terminated.
                let p = unsafe { libc::dlsym(self.handle.as_ptr(), c_name.as_ptr()) };
                NonNull::new(p)
            }
        };
        found.ok_or_else(|| Error::SymbolMissing {
            symbol: printable,
            library: self.path.clone(),
        })
    }

    /// Looks `name` up with plain `dlsym`: any symbol the library exports, beyond the
    /// verbs (e.g. a provider's own controls).
    pub(crate) fn lookup(&self, name: &CStr) -> Option<NonNull<c_void>> {
        // SAFETY: `handle` is a live dlopen handle and `name` is NUL-terminated.
        NonNull::new(unsafe { libc::dlsym(self.handle.as_ptr(), name.as_ptr()) })
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn dlvsym(&self, name: *const c_char, version: *const c_char) -> Option<NonNull<c_void>> {
        // SAFETY: `handle` is a live dlopen handle; `name` and `version` point to
        // NUL-terminated strings owned by the caller for the duration of the call.
        NonNull::new(unsafe { libc::dlvsym(self.handle.as_ptr(), name, version) })
    }

    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    fn dlvsym(&self, _name: *const c_char, _version: *const c_char) -> Option<NonNull<c_void>> {
        None
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from `dlopen` and is closed exactly once; every object
        // that used a symbol from it holds the owning `Verbs`, so none is alive now.
        unsafe {
            libc::dlclose(self.handle.as_ptr());
        }
    }
}

impl core::fmt::Debug for Library {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Library").field("path", &self.path).finish()
    }
}

/// `dlerror()`'s message, or a placeholder when it has none.
fn dlerror_text() -> String {
    // SAFETY: `dlerror` takes no arguments; its result is a thread-local string valid
    // until the next dl* call on this thread, and we copy it out at once.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        return "dlopen failed without a message".into();
    }
    // SAFETY: non-null `dlerror` results are NUL-terminated C strings.
    unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned()
}
