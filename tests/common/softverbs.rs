//! Virtual QPs over the `dlopen`ed `libvqp_softverbs.so`, built by host `Endpoint`s:
//! the library, its fault controls, connected pairs over one or two devices, a driver
//! that posts a list of requests and collects every completion, and the checks.
//!
//! Include with `#[path = "common/softverbs.rs"] mod softverbs;`.
#![allow(dead_code)]

#[path = "softverbs/checks.rs"]
mod checks;
#[path = "softverbs/controls.rs"]
mod controls;
#[path = "softverbs/driver.rs"]
mod driver;
#[path = "softverbs/pairs.rs"]
mod pairs;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

use vqp_host::{Connected, Endpoint, Verbs};

pub use checks::*;
pub use controls::*;
pub use driver::*;
pub use pairs::*;

/// Up to 8 data QPs of 16 WQEs, 128 requests per direction, a window of 512, over up
/// to two devices.
pub type Ep = Endpoint<8, 16, 128, 512, 2, 32>;
/// A connected side of [`Ep`].
pub type Conn = Connected<8, 16, 128, 512, 2, 32>;

/// Fragment size of every pair: 1 MiB is 16 fragments.
pub const MAX_FRAG: u32 = 64 << 10;

/// The cdylib cargo builds next to the test binary (`target/<profile>/deps/`, with a
/// copy in `target/<profile>/`); panics, naming the places looked at, when missing.
pub fn cdylib() -> PathBuf {
    vqp_softverbs::find_cdylib().unwrap_or_else(|| {
        panic!(
            "the cdylib was not built; looked at {:?}",
            vqp_softverbs::cdylib_candidates()
        )
    })
}

/// The loaded provider, once per process and never unloaded (its progress thread
/// runs for the life of the process).
pub fn verbs() -> &'static Verbs {
    static VERBS: OnceLock<Verbs> = OnceLock::new();
    VERBS.get_or_init(|| {
        // SAFETY: the library implements the libibverbs ABI.
        unsafe { Verbs::load_from(&cdylib()) }.expect("dlopen the provider")
    })
}

/// Takes the lock every test of a binary holds: the reorder policy and the fault
/// rules are the loaded provider's, shared by every thread.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
