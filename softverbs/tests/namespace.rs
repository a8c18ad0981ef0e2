//! The shared namespace as a security boundary and a resource: a full QP-number table,
//! directories and files another user could control, a damaged registry, what dead
//! processes leave behind, and a namespace joined by processes with more devices than
//! it was made with. Every process is a child of the test (see `namespace_support`),
//! each test in a directory of its own.

mod common;
mod namespace_support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use namespace_support::*;

/// The child's entry point: does nothing unless this binary was started as a child.
#[test]
fn child() {
    if std::env::var_os(ENV_CHILD).is_some() {
        child_main();
    }
}

/// QP numbers in the machine-wide table (the registry's size).
const TABLE: usize = 1 << 18;

/// How often `needle` occurs in `hay`.
fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

/// A namespace refused as `why` (a text the message must contain): every
/// `ibv_create_qp` fails with `errno`, the reason is printed once and names the path.
fn assert_refused(ns: &Path, why: &str, errno: i32) {
    let mut p = Proc::spawn(ns, 2);
    for _ in 0..3 {
        let (r, _) = p.create("soft0");
        assert_eq!(r, Err(errno), "stderr:\n{}", p.stderr());
    }
    let err = p.exit();
    assert_eq!(count(&err, why), 1, "reported once, naming it:\n{err}");
}

#[test]
fn a_full_registry_fails_create_qp_with_enomem_at_once_and_never_repeats_a_number() {
    let base = scratch("full");
    let ns = base.join("ns");
    let mut a = Proc::spawn(&ns, 2);
    let (first, _) = a.create("soft0");
    let first = first.expect("a QP in an empty table");
    let held: usize = a.one("hold 2").parse().unwrap();
    assert_eq!(
        held,
        TABLE - 3,
        "all but two numbers held by a live process"
    );
    let (x, _) = a.create("soft0");
    let mut b = Proc::spawn(&ns, 2);
    let (y, _) = b.create("soft1");
    let (x, y) = (x.unwrap(), y.unwrap());
    assert!(x != y && x != first && y != first, "{first} {x} {y}");
    for p in [&mut a, &mut b] {
        for _ in 0..5 {
            let (r, took) = p.create("soft0");
            println!("ibv_create_qp on a full table: {r:?} in {took:?}");
            assert_eq!(r, Err(libc::ENOMEM), "the table is full");
            assert!(
                took < Duration::from_millis(50),
                "{took:?} for a full table"
            );
        }
    }
    // A number freed by its owner's exit is there for the next creation.
    b.exit();
    let (again, _) = a.create("soft1");
    assert_eq!(again, Ok(y));
}

#[test]
fn a_symlinked_namespace_directory_is_refused() {
    let base = scratch("symlink");
    let real = base.join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = base.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_refused(
        &link,
        &format!("{} is a symlink", link.display()),
        libc::EACCES,
    );
    assert!(names(&real).is_empty(), "nothing made through the link");
}

#[test]
fn a_world_writable_namespace_directory_is_refused() {
    let base = scratch("writable");
    let ns = base.join("ns");
    std::fs::create_dir(&ns).unwrap();
    std::fs::set_permissions(&ns, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert_refused(
        &ns,
        &format!("{} is writable by group/others (mode 1777)", ns.display()),
        libc::EACCES,
    );
    assert!(names(&ns).is_empty(), "nothing made in it");
}

#[test]
fn a_registry_that_is_a_symlink_or_writable_by_others_is_refused() {
    let base = scratch("file-mode");
    let ns = base.join("ns");
    Proc::spawn(&ns, 2).create("soft0").0.unwrap();
    let reg = registry(&ns);
    std::fs::set_permissions(&reg, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_refused(
        &ns,
        &format!("{} is writable by group/others (mode 0666)", reg.display()),
        libc::EACCES,
    );
    std::fs::set_permissions(&reg, std::fs::Permissions::from_mode(0o600)).unwrap();
    let moved = base.join("elsewhere");
    std::fs::rename(&reg, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &reg).unwrap();
    assert_refused(
        &ns,
        &format!("{} is a symlink", reg.display()),
        libc::EACCES,
    );
}

#[test]
fn a_namespace_file_of_another_user_is_refused() {
    if !is_root() {
        println!("skipped: chown to another user needs root");
        return;
    }
    let base = scratch("owner");
    let ns = base.join("ns");
    Proc::spawn(&ns, 2).create("soft0").0.unwrap();
    let reg = registry(&ns);
    std::os::unix::fs::chown(&reg, Some(65534), None).unwrap();
    assert_refused(
        &ns,
        &format!("{} is owned by uid 65534, not 0", reg.display()),
        libc::EACCES,
    );
    std::os::unix::fs::chown(&reg, Some(0), None).unwrap();
    std::os::unix::fs::chown(&ns, Some(65534), None).unwrap();
    assert_refused(
        &ns,
        &format!("{} is owned by uid 65534, not 0", ns.display()),
        libc::EACCES,
    );
}

#[test]
fn a_damaged_registry_is_reported_once_and_fails_create_qp() {
    let base = scratch("damaged");
    let ns = base.join("ns");
    Proc::spawn(&ns, 2).create("soft0").0.unwrap();
    let reg = registry(&ns);
    let len = std::fs::metadata(&reg).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&reg).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    assert_refused(&ns, "is damaged or of another version", libc::EPROTO);
    // Noise of the right length.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&reg, noise).unwrap();
    assert_refused(&ns, "is damaged or of another version", libc::EPROTO);
}

/// Kills (`SIGKILL`) `n` children that each hold `qps` QPs of `ns`, all started before
/// any is killed (a process that joins reclaims what dead ones left).
fn kill_holders(ns: &Path, n: usize, qps: usize) {
    let mut v: Vec<Proc> = (0..n).map(|_| Proc::spawn(ns, 2)).collect();
    for p in &mut v {
        for _ in 0..qps {
            p.create("soft0").0.unwrap();
        }
    }
    for p in v {
        p.kill();
    }
}

fn proc_files(ns: &Path) -> Vec<String> {
    names(ns)
        .into_iter()
        .filter(|n| n.starts_with("proc-") || n.starts_with("tmp-"))
        .collect()
}

#[test]
fn dead_owners_files_and_numbers_are_reclaimed_when_a_process_joins() {
    let base = scratch("dead-join");
    let ns = base.join("ns");
    kill_holders(&ns, 3, 4);
    assert_eq!(proc_files(&ns).len(), 3, "{:?}", names(&ns));
    let mut fresh = Proc::spawn(&ns, 2);
    fresh.create("soft1").0.unwrap();
    assert_eq!(proc_files(&ns).len(), 1, "only ours: {:?}", names(&ns));
    let took: usize = fresh.one("hold 0").parse().unwrap();
    assert_eq!(took, TABLE - 1, "every number but our QP's is free again");
}

#[test]
fn a_live_process_sweeps_dead_owners_periodically() {
    let base = scratch("dead-sweep");
    let ns = base.join("ns");
    let mut live = Proc::spawn(&ns, 2);
    live.create("soft0").0.unwrap();
    kill_holders(&ns, 2, 3);
    // Nobody joins from here on: only the live process's sweep can reclaim.
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc_files(&ns).len() > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(proc_files(&ns).len(), 1, "left: {:?}", names(&ns));
    let took: usize = live.one("hold 0").parse().unwrap();
    assert_eq!(
        took,
        TABLE - 1,
        "the dead processes' numbers are free again"
    );
}

#[test]
fn a_process_with_more_devices_than_the_namespace_has_them_all() {
    let base = scratch("grow");
    let ns = base.join("ns");
    let mut small = Proc::spawn(&ns, 2);
    small.create("soft0").0.unwrap();
    let mut b = Proc::spawn(&ns, 3);
    let mut c = Proc::spawn(&ns, 3);
    let sb: Vec<u64> = b
        .one("side soft2")
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    let sc: Vec<u64> = c
        .one("side soft2")
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    b.cmd(&format!("connect {} {}", sc[1], sc[0]));
    c.cmd(&format!("connect {} {}", sb[1], sb[0]));
    b.cmd("fill 7");
    c.cmd("fill 1");
    assert_eq!(
        b.one(&format!("write 100 5000 {} {}", sc[2] + 300, sc[3])),
        "Success"
    );
    assert_eq!(c.one("read 300 5000"), b.one("read 100 5000"));
    let late = Proc::spawn(&ns, 2);
    for (who, err) in [
        ("first", small.exit()),
        ("b", b.exit()),
        ("c", c.exit()),
        ("late", late.exit()),
    ] {
        assert!(!err.contains("devices"), "{who} warned:\n{err}");
    }
}
