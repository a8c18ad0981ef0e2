//! The C API from C and C++: the headers included twice and compiled as C99 and
//! C++17 with `-Wall -Wextra -Werror` (vqp.hpp's errors thrown with their codes); the
//! misuse program (`tests/c/misuse.c`) plainly, under AddressSanitizer and under
//! valgrind; events, failover and fail-back (`tests/c/recovery.c`), the poll-thread
//! mode (`tests/c/poller.c`) and connecting through RDMA-CM (`tests/c/cm.c`, on
//! vqp-rdmacm), each plainly, under AddressSanitizer and under valgrind; the C round
//! trip bench (`bench/round_trip.c`) built and run briefly; the examples built from an
//! installed prefix through pkg-config and run as two processes over softverbs,
//! connected over TCP and through RDMA-CM; the header compared with what cbindgen
//! makes of the sources today.
//!
//! Each test needs programs a machine with only Rust lacks (gcc, g++, valgrind,
//! pkg-config, cbindgen): without one it prints one line naming it and passes, and
//! fails instead under `VQP_REQUIRE_SYSTEM_PACKAGES=1`, as CI sets.

#[path = "../../softverbs/tests/procs/mod.rs"]
mod procs;
#[path = "../../softverbs/tests/system/mod.rs"]
mod system;

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The crate's directory.
fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The C library cargo built for this test (`libvqp_capi.so`, SONAME `libvqp.so.0`).
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.join("libvqp_capi.so"),
        deps.parent().unwrap().join("libvqp_capi.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("libvqp_capi.so beside the test (cargo builds the crate's cdylib with it)")
}

/// The profile directory the library was built in (`target/debug`).
fn profile_dir() -> PathBuf {
    let lib = built_library();
    let dir = lib.parent().unwrap();
    if dir.ends_with("deps") {
        dir.parent().unwrap().to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("vqp-capi-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `dir/libvqp.so.0` and `dir/libvqp.so`, links to the built library, as an install
/// names them.
fn link_library(dir: &Path) {
    let lib = built_library();
    std::os::unix::fs::symlink(&lib, dir.join("libvqp.so.0")).unwrap();
    std::os::unix::fs::symlink("libvqp.so.0", dir.join("libvqp.so")).unwrap();
}

/// Runs `cmd` to the end (at most `limit`), panicking with its output unless it
/// exits 0; returns its stdout.
fn run_ok(cmd: &mut Command, limit: Duration, what: &str) -> String {
    let run = system::run(cmd, limit);
    assert!(
        run.status.is_some_and(|s| s.success()),
        "{what} failed: {}",
        run.describe()
    );
    run.stdout
}

/// Compiles `src` with `compiler` against the header and the built library.
fn compile(compiler: &Path, args: &[&str], src: &Path, out: &Path, lib_dir: &Path) {
    let mut c = Command::new(compiler);
    c.args(args)
        .arg("-Wall")
        .arg("-Wextra")
        .arg("-Werror")
        .arg("-I")
        .arg(here().join("include"))
        .arg(src)
        .arg("-o")
        .arg(out)
        .arg(format!("-L{}", lib_dir.display()))
        .arg("-lvqp")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()));
    run_ok(
        &mut c,
        Duration::from_secs(120),
        &format!("compiling {}", src.display()),
    );
}

/// vqp-rdmacm's library (a dev-dependency), the librdmacm of softverbs, where cargo
/// built it for this run (a test build leaves it in the profile's deps directory).
fn rdmacm_library() -> PathBuf {
    let candidates = vqp_softverbs::cdylib_candidates_of("vqp_rdmacm");
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!("vqp-rdmacm's library was not built; looked at {candidates:?} (cargo test builds it)")
        })
}

/// The environment that puts a program on softverbs: its cdylib as the verbs library,
/// vqp-rdmacm's as librdmacm, and a namespace directory of its own (which also holds
/// vqp-rdmacm's listeners, so that the program's ports are its own).
fn softverbs_env(ns: &Path) -> Vec<(&'static str, OsString)> {
    let lib = vqp_softverbs::find_cdylib().expect("the softverbs cdylib (a dev-dependency)");
    vec![
        ("VQP_IBVERBS_PATH", lib.into_os_string()),
        ("VQP_RDMACM_PATH", rdmacm_library().into_os_string()),
        ("VQP_SOFT_DIR", ns.as_os_str().to_owned()),
    ]
}

#[test]
fn headers_included_twice_compile_as_c99_and_cpp17_without_warnings() {
    let test = "headers_included_twice_compile_as_c99_and_cpp17_without_warnings";
    let Some(gcc) = system::program(test, "gcc", "gcc") else {
        return;
    };
    let Some(gxx) = system::program(test, "g++", "g++") else {
        return;
    };
    let dir = Scratch::new("twice");
    link_library(&dir.0);
    let src = here().join("tests/c/twice.c");
    let c = dir.0.join("twice_c");
    compile(&gcc, &["-std=c99", "-pedantic"], &src, &c, &dir.0);
    let cpp = dir.0.join("twice_cpp");
    compile(
        &gxx,
        &["-std=c++17", "-pedantic", "-x", "c++"],
        &src,
        &cpp,
        &dir.0,
    );
    let hpp = dir.0.join("twice_hpp");
    compile(
        &gxx,
        &["-std=c++17", "-pedantic"],
        &here().join("tests/c/twice.cpp"),
        &hpp,
        &dir.0,
    );
    for exe in [c, cpp, hpp] {
        run_ok(&mut Command::new(&exe), Duration::from_secs(30), "twice");
    }
}

/// Builds `tests/c/<program>.c` for `test` (with `extra` compiler flags) and runs it
/// through `wrapper` (e.g. valgrind) over softverbs; it must report its checks passed.
fn c_program(test: &str, program: &str, extra: &[&str], wrapper: &[&OsString]) {
    let Some(gcc) = system::program(test, "gcc", "gcc") else {
        return;
    };
    let dir = Scratch::new(test);
    link_library(&dir.0);
    let exe = dir.0.join(program);
    let mut args = vec!["-std=c99", "-g"];
    args.extend_from_slice(extra);
    compile(
        &gcc,
        &args,
        &here().join(format!("tests/c/{program}.c")),
        &exe,
        &dir.0,
    );
    let ns = dir.0.join("ns");
    let mut cmd = match wrapper.split_first() {
        Some((w, rest)) => {
            let mut c = Command::new(w);
            c.args(rest).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    cmd.envs(softverbs_env(&ns));
    let out = run_ok(&mut cmd, Duration::from_secs(300), test);
    assert!(out.contains("checks passed"), "{out}");
}

/// The flags of a program built for AddressSanitizer and UBSan, any finding fatal.
const SANITIZERS: [&str; 3] = [
    "-fsanitize=address,undefined",
    "-fno-omit-frame-pointer",
    "-fno-sanitize-recover=all",
];

/// Builds `tests/c/<program>.c` with `extra` and [`SANITIZERS`]' flags and runs it as
/// [`c_program`] does.
fn under_sanitizers(test: &str, program: &str, extra: &[&str]) {
    let flags: Vec<&str> = extra.iter().copied().chain(SANITIZERS).collect();
    c_program(test, program, &flags, &[]);
}

#[test]
fn misuse_returns_error_codes_never_crashes() {
    c_program(
        "misuse_returns_error_codes_never_crashes",
        "misuse",
        &[],
        &[],
    );
}

#[test]
fn misuse_under_address_sanitizer_is_clean() {
    under_sanitizers("misuse_under_address_sanitizer_is_clean", "misuse", &[]);
}

#[test]
fn events_failover_and_failback_through_the_c_api() {
    c_program(
        "events_failover_and_failback_through_the_c_api",
        "recovery",
        &[],
        &[],
    );
}

#[test]
fn events_failover_and_failback_under_address_sanitizer() {
    under_sanitizers(
        "events_failover_and_failback_under_address_sanitizer",
        "recovery",
        &[],
    );
}

#[test]
fn poll_thread_mode_through_the_c_api() {
    c_program("poll_thread_mode_through_the_c_api", "poller", &[], &[]);
}

#[test]
fn poll_thread_mode_under_address_sanitizer() {
    under_sanitizers("poll_thread_mode_under_address_sanitizer", "poller", &[]);
}

#[test]
fn rdma_cm_connects_and_refuses_through_the_c_api() {
    c_program(
        "rdma_cm_connects_and_refuses_through_the_c_api",
        "cm",
        &["-pthread"],
        &[],
    );
}

#[test]
fn rdma_cm_under_address_sanitizer() {
    under_sanitizers("rdma_cm_under_address_sanitizer", "cm", &["-pthread"]);
}

#[test]
fn the_round_trip_bench_builds_and_runs() {
    let test = "the_round_trip_bench_builds_and_runs";
    let Some(gcc) = system::program(test, "gcc", "gcc") else {
        return;
    };
    let dir = Scratch::new(test);
    link_library(&dir.0);
    let exe = dir.0.join("round_trip");
    compile(
        &gcc,
        &["-std=c99", "-O2"],
        &here().join("bench/round_trip.c"),
        &exe,
        &dir.0,
    );
    let out = run_ok(
        Command::new(&exe)
            .arg("1000")
            .envs(softverbs_env(&dir.0.join("ns"))),
        Duration::from_secs(120),
        test,
    );
    assert!(out.contains("1000 requests"), "{out}");
}

/// One suppression, for the Rust standard library rather than this project (as in
/// `.ci/valgrind.sh`): a thread's `std::thread::current()` handle is referenced only
/// through a pointer into the middle of its allocation, which memcheck reports as
/// "possibly lost" at exit (rust-lang/rust#135608).
const STD_SUPPRESSION: &str = "{
   rust-std-thread-handle-rust-lang-rust-135608
   Memcheck:Leak
   match-leak-kinds: possible
   fun:malloc
   ...
   fun:*init_current*
}
";

/// Runs `tests/c/<program>.c` under memcheck: any error, leaks included ("definitely"
/// or "possibly lost"), fails it.
fn under_valgrind(test: &str, program: &str, extra: &[&str]) {
    let Some(valgrind) = system::program(test, "valgrind", "valgrind") else {
        return;
    };
    let supp = std::env::temp_dir().join(format!("vqp-capi-{test}-{}.supp", std::process::id()));
    std::fs::write(&supp, STD_SUPPRESSION).unwrap();
    let args: Vec<OsString> = vec![
        valgrind.into_os_string(),
        "--error-exitcode=99".into(),
        // Memcheck runs one thread at a time; a spinning poll loop would otherwise
        // keep the others off it for seconds.
        "--fair-sched=yes".into(),
        "--leak-check=full".into(),
        "--errors-for-leak-kinds=definite,possible".into(),
        format!("--suppressions={}", supp.display()).into(),
    ];
    let refs: Vec<&OsString> = args.iter().collect();
    c_program(test, program, extra, &refs);
    let _ = std::fs::remove_file(&supp);
}

#[test]
fn misuse_under_valgrind_is_clean() {
    under_valgrind("misuse_under_valgrind_is_clean", "misuse", &[]);
}

#[test]
fn events_failover_and_failback_under_valgrind_are_clean() {
    under_valgrind(
        "events_failover_and_failback_under_valgrind_are_clean",
        "recovery",
        &[],
    );
}

#[test]
fn poll_thread_mode_under_valgrind_is_clean() {
    under_valgrind("poll_thread_mode_under_valgrind_is_clean", "poller", &[]);
}

#[test]
fn rdma_cm_under_valgrind_is_clean() {
    under_valgrind("rdma_cm_under_valgrind_is_clean", "cm", &["-pthread"]);
}

/// Builds `example` (C or C++) against the prefix through pkg-config.
fn build_example(compiler: &Path, std: &str, example: &str, prefix: &Path, dir: &Path) -> PathBuf {
    let exe = dir.join(example.replace('.', "_"));
    let pc = Command::new("pkg-config")
        .args(["--cflags", "--libs", "vqp"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .expect("pkg-config runs");
    assert!(
        pc.status.success(),
        "pkg-config --cflags --libs vqp failed: {pc:?}"
    );
    let flags = String::from_utf8(pc.stdout).unwrap();
    let mut c = Command::new(compiler);
    c.arg(std)
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(here().join("examples").join(example))
        .args(flags.split_whitespace())
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()));
    run_ok(
        &mut c,
        Duration::from_secs(180),
        &format!("building {example}"),
    );
    exe
}

/// How the examples' two processes connect.
#[derive(Clone, Copy, PartialEq)]
enum Via {
    /// The TCP card exchange (the server's port is awaited before the client starts).
    Tcp,
    /// RDMA-CM through vqp-rdmacm (`--rdma-cm`): the client starts at once and asks
    /// again until the server listens.
    RdmaCm,
}

/// Runs the example `exe` as a server and a client over softverbs, connected `via`;
/// both must verify the data.
fn two_processes(exe: &Path, via: Via, dir: &Path) {
    let example = exe.file_name().unwrap().to_string_lossy().into_owned();
    let tag = if via == Via::RdmaCm { "-cm" } else { "" };
    let ns = dir.join(format!("ns-{example}{tag}"));
    let port = procs::free_port();
    let env = softverbs_env(&ns);
    let role = |r: &str, dev: &str| {
        let mut a: Vec<String> = Vec::new();
        if via == Via::RdmaCm {
            a.push("--rdma-cm".into());
        }
        a.extend([r.into(), format!("127.0.0.1:{port}"), dev.into()]);
        a
    };
    let mut server = procs::Killed(Some(system::spawn(
        Command::new(exe)
            .args(role("server", "soft1"))
            .envs(env.clone()),
    )));
    if via == Via::Tcp {
        let until = Instant::now() + Duration::from_secs(30);
        while !procs::listening(port) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut client = procs::Killed(Some(system::spawn(
        Command::new(exe).args(role("client", "soft0")).envs(env),
    )));
    let deadline = Instant::now() + Duration::from_secs(120);
    let c = procs::wait(&mut client, deadline, "client");
    let s = procs::wait(&mut server, deadline, "server");
    let show = |o: &std::process::Output| {
        format!(
            "{:?}\n{}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(
        c.status.success(),
        "{example} client: {}\nserver: {}",
        show(&c),
        show(&s)
    );
    assert!(s.status.success(), "{example} server: {}", show(&s));
    for (who, o) in [("client", &c), ("server", &s)] {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("1048576 bytes verified"),
            "{example} {who}: {out}"
        );
        assert_eq!(
            out.contains("RDMA-CM"),
            via == Via::RdmaCm,
            "{example} {who}: {out}"
        );
    }
}

/// Installs the library built for this test into `dir/prefix` with `install.sh`, as
/// CI does, and checks the files are there.
fn install(dir: &Path) -> PathBuf {
    let prefix = dir.join("prefix");
    let profile = profile_dir();
    let name = profile.file_name().unwrap().to_str().unwrap().to_owned();
    run_ok(
        Command::new("bash")
            .arg(here().join("install.sh"))
            .args(["--no-build", "--profile", &name])
            .arg(&prefix)
            .env("CARGO_TARGET_DIR", profile.parent().unwrap()),
        Duration::from_secs(60),
        "install.sh",
    );
    for f in [
        "lib/libvqp.so.0",
        "lib/libvqp.so",
        "lib/libvqp.a",
        "include/vqp.h",
        "include/vqp.hpp",
    ] {
        assert!(prefix.join(f).exists(), "{f} not installed");
    }
    prefix
}

/// For `test`: installs the library into scratch directory `tag`, builds the C and the
/// C++ example from there and runs each as two processes connected `via`.
fn examples_from_the_prefix(test: &str, tag: &str, via: Via) {
    let Some(gcc) = system::program(test, "gcc", "gcc") else {
        return;
    };
    let Some(gxx) = system::program(test, "g++", "g++") else {
        return;
    };
    let Some(_) = system::program(test, "pkg-config", "pkg-config") else {
        return;
    };
    let dir = Scratch::new(tag);
    let prefix = install(&dir.0);
    let c = build_example(&gcc, "-std=c99", "xfer.c", &prefix, &dir.0);
    two_processes(&c, via, &dir.0);
    let cpp = build_example(&gxx, "-std=c++17", "xfer.cpp", &prefix, &dir.0);
    two_processes(&cpp, via, &dir.0);
}

#[test]
fn examples_built_from_the_installed_prefix_run_as_two_processes() {
    examples_from_the_prefix(
        "examples_built_from_the_installed_prefix_run_as_two_processes",
        "install",
        Via::Tcp,
    );
}

#[test]
fn examples_connect_through_rdma_cm_as_two_processes() {
    examples_from_the_prefix(
        "examples_connect_through_rdma_cm_as_two_processes",
        "install-cm",
        Via::RdmaCm,
    );
}

#[test]
fn header_is_what_cbindgen_makes_today() {
    let test = "header_is_what_cbindgen_makes_today";
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|d| d.join("cbindgen"))
        .find(|p| p.is_file());
    let Some(cbindgen) = found else {
        let line = format!(
            "skipped {test}: cbindgen is not installed; it needs cbindgen 0.29.4 (cargo install --locked --version 0.29.4 cbindgen)"
        );
        if std::env::var(system::REQUIRE).is_ok_and(|v| v == "1") {
            panic!("{line}; {}=1 says it must run", system::REQUIRE);
        }
        // Straight to stderr, past the harness's capture, as the package gates do.
        let _ = writeln!(std::io::stderr(), "{line}");
        return;
    };
    let dir = Scratch::new("header");
    let out = dir.0.join("vqp.h");
    run_ok(
        Command::new(cbindgen)
            .arg("--config")
            .arg(here().join("cbindgen.toml"))
            .args(["--crate", "vqp-capi", "--quiet", "--output"])
            .arg(&out)
            .arg(here()),
        Duration::from_secs(120),
        "cbindgen",
    );
    let made = std::fs::read_to_string(&out).unwrap();
    let kept = std::fs::read_to_string(here().join("include/vqp.h")).unwrap();
    assert!(
        made == kept,
        "capi/include/vqp.h is not what cbindgen makes of the sources today: regenerate it with\n  cbindgen --config capi/cbindgen.toml --crate vqp-capi --output capi/include/vqp.h capi"
    );
}
