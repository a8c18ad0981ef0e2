//! `softverbs run`: runs an unmodified program on the soft devices, presented the way a
//! kernel RDMA provider presents a NIC.
//!
//! Loading softverbs as `libibverbs.so.1` is enough for a program that only calls
//! libibverbs. The software above it looks further: UCX uses a device only when
//! `/dev/infiniband/<dev_name>` is a readable and writable character device, and reads
//! `/sys/class/infiniband/<dev>/device/{local_cpus,numa_node}` for its topology and
//! `ports/1/gid_attrs/types/<i>` for the GIDs' type; Open
//! MPI's `openib` component requires `$(ibv_get_sysfs_path)/class/infiniband`; rdma-core
//! reads `/sys/class/infiniband_verbs`. The launcher provides these, in a private mount
//! namespace, and then `exec`s the program, whose exit status is therefore the
//! launcher's:
//!
//! - **the namespace**: as root, `unshare(CLONE_NEWNS)`; otherwise (or where that is
//!   refused) `unshare(CLONE_NEWUSER | CLONE_NEWNS)` with a one-line identity uid/gid
//!   map, so that the program keeps its uid and sees files, and the shared namespace
//!   directory, as outside. Every mount is then made private, so nothing propagates
//!   out. Where no namespace can be made, the launcher says so in one line, with what to
//!   do, and exits 125: it never touches the machine's `/dev` or `/sys`.
//! - **`/dev`**: a tmpfs laid over it that holds every entry of the machine's `/dev`
//!   (directories and files bound from underneath, `/dev/shm` and `/dev/pts` with what
//!   is mounted on them, symbolic links copied), plus `/dev/infiniband/uverbs<i>` for
//!   each device: the machine's `/dev/null` bound onto a file, a character device
//!   without `CAP_MKNOD`. (A `mkdir` in `/dev` itself would land in the host's
//!   devtmpfs, which every mount namespace shares.)
//! - **`/sys/class`**: likewise a tmpfs keeping every class of the machine's, plus
//!   `infiniband/soft<i>/` with the attributes softverbs answers through
//!   `ibv_read_sysfs_file` (`node_type`, `node_guid`, `sys_image_guid`, `fw_ver`,
//!   `hca_type`, `board_id`, `ports/1/{state,phys_state,rate,lid,gids/N,link_layer,…}`),
//!   a `device/` directory for the parent device (vendor 0xffff, no NUMA node, every CPU
//!   local), and `infiniband_verbs/{abi_version,uverbs<i>/{ibdev,abi_version,dev,device}}`;
//!   read-only. It is a snapshot taken at start: a link taken down or re-rated later is
//!   seen through the verbs and `ibv_read_sysfs_file`, not in these files. A machine's
//!   own `infiniband` classes and `/dev/infiniband`, if it has any, are hidden inside.
//! - **the environment**: `LD_PRELOAD` names the cdylib (whose SONAME is
//!   `libibverbs.so.1`, so the dynamic loader resolves every dependency on libibverbs to
//!   it and the system's library is never loaded); `SYSFS_PATH=/sys`;
//!   `VQP_SOFT_DEVICES`; `VQP_SOFT_DIR` when `--dir` is given; `VQP_SOFT_NETDEV` when
//!   `--netdev` is given (a bound device's tree shows its RoCE port: link layer
//!   `Ethernet`, `gids/N`, `gid_attrs/types/N` `RoCE v2`, `gid_attrs/ndevs/N`, read in
//!   the launcher's network namespace). Every `softverbs run`
//!   naming the same directory (by default the user's own) shares the devices.
//!
//! - **RDMA-CM**: where vqp-rdmacm's cdylib is found (`$VQP_RDMACM_LIB`, else the one
//!   cargo built beside this binary), it is preloaded too — its SONAME is
//!   `librdmacm.so.1`, so programs linked against librdmacm use it — and
//!   `/dev/infiniband/rdma_cm` is presented as the `uverbs` files are.
//!
//! Not provided: anything of a specific NIC's driver. A program that opens the
//! character device itself to speak a kernel ABI, or takes mlx5-only paths (DEVX,
//! `mlx5dv_*`, UCX's `rc_mlx5`/`dc_mlx5`/`ud_mlx5` transports), finds no mlx5 device
//! here; UCX's generic `rc_verbs` and `ud_verbs` serve it.

mod args;
#[allow(unsafe_code)]
mod mount;
mod tree;

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;

pub use args::{parse, Command, Options, UsageError, USAGE};

/// The variable naming the cdylib to load when `--lib` is not given.
pub const ENV_LIB: &str = "VQP_SOFT_LIB";

/// The variable naming the librdmacm to preload (vqp-rdmacm's cdylib); when it is
/// not set, the one cargo built beside this binary, if any; set and empty: none.
pub const ENV_RDMACM_LIB: &str = "VQP_RDMACM_LIB";

/// Exit status for a command line that does not parse.
pub const EXIT_USAGE: i32 = 2;
/// Exit status when the namespace (or what is presented in it) cannot be made, or the
/// library is not found.
pub const EXIT_SETUP: i32 = 125;
/// Exit status when the program exists but cannot be executed.
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// Exit status when the program is not found.
pub const EXIT_NOT_FOUND: i32 = 127;

/// Runs the launcher on the arguments after the binary's name; returns the exit status
/// when it does not `exec` the program.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    match parse(args) {
        Ok(Command::Help) => {
            println!("{USAGE}");
            0
        }
        Ok(Command::Run(o)) => run(&o),
        Err(e) => {
            eprintln!("softverbs: {e}\n{USAGE}");
            EXIT_USAGE
        }
    }
}

/// The cdylib to load: `--lib`, else `$VQP_SOFT_LIB`, else the one cargo built beside
/// this binary; as an absolute path.
fn library(o: &Options) -> Result<PathBuf, String> {
    let named = o
        .lib
        .clone()
        .or_else(|| std::env::var_os(ENV_LIB).map(PathBuf::from));
    let lib = match named {
        Some(p) => p,
        None => newest_cdylib().ok_or_else(|| {
            format!(
                "libvqp_softverbs.so not found (looked at {}); build it with `cargo build -p \
                 vqp-softverbs` or name it with --lib",
                crate::cdylib_candidates()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?,
    };
    let lib = std::fs::canonicalize(&lib)
        .ok()
        .filter(|p| p.is_file())
        .ok_or_else(|| format!("{}: no such library", lib.display()))?;
    // LD_PRELOAD separates its entries with spaces and colons.
    if lib.to_string_lossy().contains([' ', ':']) {
        return Err(format!(
            "{}: LD_PRELOAD cannot name a path with a space or a colon; copy the library \
             elsewhere and name it with --lib",
            lib.display()
        ));
    }
    Ok(lib)
}

/// The most recently built of the cdylibs cargo left beside this binary: a build of the
/// binary alone refreshes `deps/libvqp_softverbs.so` while the copy in
/// `target/<profile>/` stays as the last full build of the package left it.
fn newest_cdylib() -> Option<PathBuf> {
    crate::cdylib_candidates()
        .into_iter()
        .filter_map(|p| {
            let built = std::fs::metadata(&p).ok()?.modified().ok()?;
            p.is_file().then_some((built, p))
        })
        .max_by_key(|(built, _)| *built)
        .map(|(_, p)| p)
}

/// vqp-rdmacm's cdylib to preload as `librdmacm.so.1`: `$VQP_RDMACM_LIB`, else the
/// newest one cargo built beside this binary; `None` when there is none (or the
/// variable is set and empty), or its path cannot be preloaded.
fn rdmacm_library() -> Option<PathBuf> {
    let lib = match std::env::var_os(ENV_RDMACM_LIB) {
        Some(v) if v.is_empty() => return None,
        Some(v) => PathBuf::from(v),
        None => crate::cdylib_candidates_of("vqp_rdmacm")
            .into_iter()
            .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
            .max_by_key(|(built, _)| *built)
            .map(|(_, p)| p)?,
    };
    std::fs::canonicalize(lib)
        .ok()
        .filter(|p| p.is_file() && !p.to_string_lossy().contains([' ', ':']))
}

/// The number of devices: `--devices`, else `$VQP_SOFT_DEVICES`, else the default.
fn device_count(o: &Options) -> usize {
    o.devices
        .or_else(|| std::env::var_os(crate::ENV_DEVICES).and_then(|v| args::device_count(&v).ok()))
        .unwrap_or(crate::DEFAULT_DEVICES)
}

/// `softverbs run`: the namespace, the devices in it, then `exec`; returns only on
/// failure, with the launcher's exit status.
fn run(o: &Options) -> i32 {
    let lib = match library(o) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("softverbs run: {e}");
            return EXIT_SETUP;
        }
    };
    let dir = match o.dir.as_ref().map(std::path::absolute).transpose() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("softverbs run: --dir: {e}");
            return EXIT_USAGE;
        }
    };
    let devices = device_count(o);
    if let Some(n) = &o.netdev {
        // Read by the sysfs tree below (the GIDs of the bound ports) and by PROGRAM's
        // provider; the launcher is single-threaded here.
        std::env::set_var(crate::ENV_NETDEV, n);
    }
    let rdmacm = rdmacm_library();
    let cpus = tree::Cpus::of_machine();
    let present = || {
        let rdev = mount::present_dev(devices, rdmacm.is_some())?;
        mount::present_sys(&tree::nodes(devices, rdev, &cpus))
    };
    let made = mount::enter_private_namespace()
        .map_err(|e| ("cannot make a private mount namespace", e))
        .and_then(|()| present().map_err(|e| ("cannot present the devices", e)));
    if let Err((what, e)) = made {
        eprintln!("softverbs run: {what}: {e}");
        return EXIT_SETUP;
    }
    let mut preload = lib.into_os_string();
    if let Some(cm) = rdmacm {
        preload.push(":");
        preload.push(cm);
    }
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut cmd = std::process::Command::new(&o.program[0]);
    cmd.args(&o.program[1..])
        .env("LD_PRELOAD", preload)
        .env("SYSFS_PATH", "/sys")
        .env(crate::ENV_DEVICES, devices.to_string());
    if let Some(d) = dir {
        cmd.env(crate::ENV_DIR, d);
    }
    let e = cmd.exec();
    eprintln!(
        "softverbs run: cannot run {}: {e}",
        o.program[0].to_string_lossy()
    );
    if e.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXECUTE
    }
}
