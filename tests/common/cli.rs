//! Running `write_bw` and `lat` as a user does, for the tests: the binaries next to
//! the test (built once per test process), their output, and the numbers and counts
//! the tests read from it.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{OnceLock, PoisonError, RwLock, RwLockReadGuard};

/// The machine, as the tests of one binary share it: they run in parallel, each
/// holding it shared while its programs run, except a test whose assertion is about
/// how fast links are used ([`alone`]), which holds it alone — on two cores, another
/// test's processes would make the CPU, not the rated links, the limit.
static MACHINE: RwLock<()> = RwLock::new(());

thread_local! {
    /// Whether this thread holds [`MACHINE`] alone (its runs take no shared hold).
    static ALONE: Cell<bool> = const { Cell::new(false) };
}

/// The machine held shared while the guard lives (nothing when this thread holds it
/// alone), for a test running programs of its own.
pub fn share() -> Option<RwLockReadGuard<'static, ()>> {
    (!ALONE.get()).then(|| MACHINE.read().unwrap_or_else(PoisonError::into_inner))
}

/// Runs `cmd` to its end and returns its output, holding the machine shared (unless
/// this thread holds it alone).
pub fn output(cmd: &mut Command) -> Output {
    let _shared = share();
    cmd.output().expect("the program runs")
}

/// Runs `f` with the machine to itself: no other test's programs run meanwhile.
pub fn alone<T>(f: impl FnOnce() -> T) -> T {
    let _alone = MACHINE.write().unwrap_or_else(PoisonError::into_inner);
    ALONE.set(true);
    let r = f();
    ALONE.set(false);
    r
}

/// `target/<profile>`, where this test runs from (`deps/`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe.parent().expect("the test lies in deps/");
    deps.parent()
        .expect("deps/ lies in the profile's directory")
        .to_path_buf()
}

/// Builds the examples once per test process, in the profile this test was built in.
fn build(dir: &Path) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "--quiet",
        "--example",
        "write_bw",
        "--example",
        "lat",
    ]);
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(other) => {
            cmd.args(["--profile", other]);
        }
        None => panic!("cannot tell the profile from {}", dir.display()),
    }
    let status = cmd.status().expect("cargo runs");
    assert!(status.success(), "building the examples failed: {status}");
}

/// The path of example `name`, built if needed.
pub fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let dir = profile_dir();
    BUILT.get_or_init(|| build(&dir));
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing after the build",
        path.display()
    );
    path
}

/// Runs `write_bw` with `args` and the environment `env`.
pub fn write_bw(args: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(example("write_bw"));
    cmd.args(args.split_whitespace());
    // The tests set what they inject; nothing from the caller's shell leaks in.
    for var in [
        "VQP_SOFT_FAIL_QP",
        "VQP_SOFT_DELAY",
        "VQP_IBVERBS_PATH",
        "VQP_SOFT_RATE",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    output(&mut cmd)
}

/// `write_bw` with `args` exits 2 with a message containing `says`.
pub fn refused(args: &str, says: &str) {
    let out = write_bw(args, &[]);
    assert_eq!(out.status.code(), Some(2), "{args}");
    let err = text(&out.stderr);
    assert!(err.contains(says), "{args}: {err}");
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The number right after `prefix` in `s`.
pub fn number_after(s: &str, prefix: &str) -> u64 {
    let at = s
        .find(prefix)
        .unwrap_or_else(|| panic!("no '{prefix}' in: {s}"));
    s[at + prefix.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number after '{prefix}' in: {s}"))
}
/// A failed run's count as one side's part of `err` (`client: ...` or `server: ...`)
/// tells it: the prefix, then `(of N posted, ... were flushed)`.
pub fn count_of<'a>(err: &'a str, side: &str) -> &'a str {
    let part = &err[err
        .find(&format!("{side}: "))
        .unwrap_or_else(|| panic!("no {side} part in: {err}"))..];
    let end = part
        .find(" were flushed")
        .map_or(0, |e| e + " were flushed".len());
    let start = part[..end]
        .rfind(" messages (of ")
        .and_then(|o| part[..o].rfind(' '))
        .unwrap_or_else(|| panic!("no count in the {side} part of: {err}"));
    &part[start + 1..end]
}

/// The count right after `failed after ` (or `failed after it read `) in one side's
/// part of `err`: the number of messages that side says the run failed after.
pub fn failed_after(err: &str, side: &str) -> u64 {
    let part = &err[err
        .find(&format!("{side}: "))
        .unwrap_or_else(|| panic!("no {side} part in: {err}"))..];
    let at = part
        .find("failed after ")
        .unwrap_or_else(|| panic!("the {side} does not say what the run failed after: {err}"));
    let rest = &part[at + "failed after ".len()..];
    number_after(rest.strip_prefix("it read ").unwrap_or(rest), "")
}

/// The client's failure line accounts for every message it posted: each completed
/// in order before the first failure, completed after it, or was flushed; none is
/// left unreported. The server's line carries the same count.
pub fn every_message_accounted_for(err: &str) {
    let prefix = number_after(err, "client: the virtual QP failed after ");
    let posted = number_after(err, "messages (of ");
    let later = number_after(err, "posted, ");
    let flushed = number_after(err, "after the first failure and ");
    assert!(
        err.contains(&format!(
            "{prefix} messages (of {posted} posted, {later} completed after the first failure and {flushed} were flushed): "
        )),
        "{err}"
    );
    assert_eq!(prefix + later + flushed, posted, "{err}");
    assert_eq!(count_of(err, "client"), count_of(err, "server"), "{err}");
}

/// The numbers of the JSON array right after `"key":[` in `json`.
pub fn json_array(json: &str, key: &str) -> Vec<u64> {
    let prefix = format!("\"{key}\":[");
    let at = json
        .find(&prefix)
        .unwrap_or_else(|| panic!("no {key} in: {json}"));
    let rest = &json[at + prefix.len()..];
    rest[..rest.find(']').expect("a closed array")]
        .split(',')
        .map(|n| n.trim().parse().unwrap_or_else(|_| panic!("{key}: {json}")))
        .collect()
}
