//! `softverbs run`, the launcher: what a program sees inside (`/dev/infiniband/uverbs*`
//! as character devices, the sysfs tree, the machine's other `/dev` and `/sys/class`
//! entries, softverbs preloaded), that the machine's `/dev`, `/sys` and mount table are
//! as before afterwards, that the program's exit status is the launcher's, and the
//! one-line refusal when no namespace can be made. Without root the launcher takes the
//! user-namespace path; as root both paths are run.

mod system;

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::Command;
use std::time::Duration;

fn launcher() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softverbs"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("VQP_SOFT_") {
            c.env_remove(k);
        }
    }
    c.env_remove("SYSFS_PATH");
    c
}

/// What the machine shows of itself: the mount table, `/dev`'s entries and whether the
/// RDMA classes exist.
fn machine() -> (String, Vec<String>, bool, bool) {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut dev: Vec<String> = std::fs::read_dir("/dev")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    dev.sort();
    (
        mounts,
        dev,
        std::path::Path::new("/dev/infiniband").exists(),
        std::path::Path::new("/sys/class/infiniband").exists(),
    )
}

const INSIDE: &str = r#"
for f in /dev/infiniband/*; do
  if [ -c "$f" ] && [ -r "$f" ] && [ -w "$f" ]; then echo "chr $f"; else echo "not a usable device: $f"; fi
done
echo "state $(cat "$SYSFS_PATH/class/infiniband/soft0/ports/1/state")"
echo "type $(cat /sys/class/infiniband/soft1/node_type)"
echo "ibdev $(cat /sys/class/infiniband_verbs/uverbs2/ibdev)"
echo "abi $(cat /sys/class/infiniband_verbs/abi_version)"
echo "parent $(readlink -f /sys/class/infiniband_verbs/uverbs1/device)"
[ -c /dev/null ] && echo "null kept"
[ -d /sys/class/net ] && echo "net kept"
echo "devices $VQP_SOFT_DEVICES"
echo "preload $LD_PRELOAD"
"#;

/// Runs [`INSIDE`] through the launcher (3 devices) as `uid`, when given, and checks
/// what it printed and that the machine is unchanged afterwards.
fn devices_are_presented(uid: Option<u32>) -> system::Run {
    let before = machine();
    let mut c = launcher();
    let mut copy = None;
    if let Some(id) = uid {
        // The build may sit where that user cannot reach it (a checkout under /root):
        // the launcher and the library, copied into a directory of their own, find
        // each other there.
        let dir = std::env::temp_dir().join(format!("vqp-launcher-as-{id}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lib = vqp_softverbs::find_cdylib().expect("the cdylib was built");
        std::fs::copy(env!("CARGO_BIN_EXE_softverbs"), dir.join("softverbs")).unwrap();
        std::fs::copy(&lib, dir.join(lib.file_name().unwrap())).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        c = Command::new(dir.join("softverbs"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(&dir)
            .uid(id)
            .gid(id);
        copy = Some(dir);
    }
    c.args(["run", "--devices", "3", "--", "sh", "-c", INSIDE]);
    let run = system::run(&mut c, Duration::from_secs(30));
    if let Some(dir) = copy {
        let _ = std::fs::remove_dir_all(dir);
    }
    let after = machine();
    assert_eq!(before, after, "the machine's mounts or /dev changed");
    assert!(!after.2 || before.2, "/dev/infiniband left behind");
    run
}

/// `rdmacm`: whether vqp-rdmacm's library is to be found beside the launcher (it is in
/// the build tree, where cargo builds it for this package's tests, and not in the copy
/// made for another user), and so preloaded after softverbs with
/// `/dev/infiniband/rdma_cm` presented.
fn check_inside(run: &system::Run, rdmacm: bool) {
    assert_eq!(
        run.status.and_then(|s| s.code()),
        Some(0),
        "{}",
        run.describe()
    );
    let want = [
        "chr /dev/infiniband/uverbs0",
        "chr /dev/infiniband/uverbs1",
        "chr /dev/infiniband/uverbs2",
        "state 4: ACTIVE",
        "type 1: CA",
        "ibdev soft2",
        "abi 6",
        "parent /sys/class/infiniband/soft1/device",
        "null kept",
        "net kept",
        "devices 3",
    ];
    let lines: Vec<&str> = run.stdout.lines().collect();
    for w in want {
        assert!(lines.contains(&w), "{w:?} missing:\n{}", run.describe());
    }
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("chr ")).count(),
        3 + usize::from(rdmacm),
        "{}",
        run.describe()
    );
    assert_eq!(
        lines.contains(&"chr /dev/infiniband/rdma_cm"),
        rdmacm,
        "{}",
        run.describe()
    );
    let preload = lines
        .iter()
        .find_map(|l| l.strip_prefix("preload "))
        .unwrap_or_default();
    let libs: Vec<&str> = preload.split(':').collect();
    let want = if rdmacm { 2 } else { 1 };
    assert!(
        libs.len() == want
            && libs[0].ends_with("libvqp_softverbs.so")
            && (!rdmacm || libs[1].ends_with("libvqp_rdmacm.so")),
        "{}",
        run.describe()
    );
}

/// Whether the launcher refused for want of a namespace (exit 125): a machine that
/// allows this user neither a mount namespace nor a user namespace (a container
/// without `CAP_SYS_ADMIN` and with user namespaces off). The test is skipped with a
/// line saying so, or fails when `VQP_REQUIRE_SYSTEM_PACKAGES=1` (CI runs it as root).
fn no_namespace_here(test: &str, run: &system::Run) -> bool {
    if run.status.and_then(|s| s.code()) != Some(125) || !run.stderr.contains("namespace") {
        return false;
    }
    let line = format!(
        "skipped {test}: the launcher gets no namespace on this machine: {}",
        run.stderr.trim()
    );
    if std::env::var(system::REQUIRE).is_ok_and(|v| v == "1") {
        panic!("{line}; {}=1 says it must run", system::REQUIRE);
    }
    eprintln!("{line}");
    true
}

#[test]
fn a_program_sees_the_devices_and_the_machine_is_unchanged() {
    let run = devices_are_presented(None);
    if no_namespace_here(
        "a_program_sees_the_devices_and_the_machine_is_unchanged",
        &run,
    ) {
        return;
    }
    check_inside(&run, true);
}

/// As root, the unprivileged path too: the launcher run as `nobody` makes a user
/// namespace (as it does for any user).
#[test]
fn an_unprivileged_user_gets_the_same_through_a_user_namespace() {
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Not root: the test above has taken this path already.
        return;
    }
    let run = devices_are_presented(Some(65534));
    if run.status.and_then(|s| s.code()) == Some(125) && run.stderr.contains("user namespaces") {
        eprintln!(
            "skipped an_unprivileged_user_gets_the_same_through_a_user_namespace: this machine \
             refuses unprivileged user namespaces: {}",
            run.stderr.trim()
        );
        return;
    }
    check_inside(&run, false);
}

#[test]
fn the_program_s_exit_status_is_the_launcher_s() {
    let run = system::run(
        launcher().args(["run", "--", "sh", "-c", "exit 7"]),
        Duration::from_secs(30),
    );
    assert_eq!(
        run.status.and_then(|s| s.code()),
        Some(7),
        "{}",
        run.describe()
    );
    let run = system::run(
        launcher().args(["run", "--", "sh", "-c", "kill -TERM $$"]),
        Duration::from_secs(30),
    );
    assert_eq!(
        run.status.and_then(|s| s.signal()),
        Some(libc::SIGTERM),
        "{}",
        run.describe()
    );
    let run = system::run(
        launcher().args(["run", "--", "/nonexistent/program"]),
        Duration::from_secs(30),
    );
    assert_eq!(
        run.status.and_then(|s| s.code()),
        Some(127),
        "{}",
        run.describe()
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.describe());
    let run = system::run(launcher().args(["run"]), Duration::from_secs(30));
    assert_eq!(
        run.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        run.describe()
    );
    let run = system::run(
        launcher().args(["run", "--lib", "/nonexistent/lib.so", "--", "true"]),
        Duration::from_secs(30),
    );
    assert_eq!(
        run.status.and_then(|s| s.code()),
        Some(125),
        "{}",
        run.describe()
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.describe());
    assert!(run.stderr.contains("no such library"), "{}", run.describe());
}

/// In a user namespace that maps no uid, a process can make no user namespace of its
/// own (the kernel refuses one whose owner has no mapping) and has no right to a mount
/// namespace: the launcher must say so in one line and exit 125, changing nothing.
#[test]
fn without_a_namespace_the_launcher_refuses_in_one_line() {
    let before = machine();
    let mut c = launcher();
    c.args(["run", "--", "sh", "-c", "echo ran"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // `unshare`, which is async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let run = match c.spawn() {
        Ok(child) => system::finish(child, Duration::from_secs(30)),
        Err(e) => {
            eprintln!(
                "skipped without_a_namespace_the_launcher_refuses_in_one_line: this machine \
                 gives the test no user namespace to start the launcher in ({e})"
            );
            return;
        }
    };
    assert_eq!(
        run.status.and_then(|s| s.code()),
        Some(125),
        "{}",
        run.describe()
    );
    assert!(!run.stdout.contains("ran"), "{}", run.describe());
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.describe());
    assert!(
        lines[0].starts_with("softverbs run: cannot make a private mount namespace: ")
            && lines[0].contains("user namespaces"),
        "{}",
        run.describe()
    );
    assert_eq!(before, machine());
}
