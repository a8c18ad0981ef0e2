//! Reclaiming what dead processes left in the namespace: their files (`proc-*`, and the
//! `tmp-*` of one killed while it joined) and their QP numbers.
//!
//! A process holds an exclusive `flock` on its file for its lifetime, and the kernel
//! drops the locks of a process that dies however it dies; so a file whose lock we can
//! take belongs to a dead process. Its numbers are freed (one pass over the registry),
//! then the file is removed while we still hold its lock, so a live process's file is
//! never removed.
//!
//! Every sweep is bounded: at most [`FILE_CHECKS`] files and [`SLOT_RUN`] registry
//! slots (whose owners, at most [`OWNER_CHECKS`] of them, are checked the same way;
//! an owner whose file is gone is dead). A process sweeps once when it joins, again
//! every [`SWEEP_EVERY`] from its service thread, and when the registry is full.

use std::fs::File;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::dir::{Create, NsDir};
use super::registry::Registry;
use super::{sys, Owner};

/// Files looked at per sweep.
pub(crate) const FILE_CHECKS: usize = 64;
/// Registry slots looked at per sweep.
pub(crate) const SLOT_RUN: usize = 1 << 14;
/// Owners of those slots checked per sweep.
pub(crate) const OWNER_CHECKS: usize = 64;
/// How often the service thread sweeps.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What one sweep reclaimed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Swept {
    pub files: usize,
    pub slots: usize,
}

/// The name of process `o`'s file.
pub(crate) fn proc_name(o: Owner) -> String {
    format!("proc-{}-{}", o.pid, o.token)
}

/// The process a namespace file belongs to, from its name (`proc-PID-TOKEN` or
/// `tmp-PID-TOKEN`).
pub(crate) fn owner_of_name(name: &str) -> Option<Owner> {
    let rest = name
        .strip_prefix("proc-")
        .or_else(|| name.strip_prefix("tmp-"))?;
    let (pid, token) = rest.split_once('-')?;
    Some(Owner {
        pid: pid.parse().ok()?,
        token: token.parse().ok()?,
    })
}

/// Takes the liveness lock of file `name`: `Some(file)` (lock held) when its process is
/// dead, `None` when it lives, is gone, or cannot be told (never reclaimed then).
fn lock_if_dead(dir: &NsDir, name: &str) -> Option<File> {
    let f = dir.open_file(name, Create::No).ok()?;
    matches!(sys::flock(&f, libc::LOCK_EX | libc::LOCK_NB), Ok(true)).then_some(f)
}

/// Whether process `o` is alive. A dead owner's numbers are freed and its file removed
/// on the way; a missing file means dead; a file that cannot be opened or checked
/// (refused, or an I/O error) counts as alive.
pub(crate) fn is_alive(dir: &NsDir, reg: &Registry, me: Owner, o: Owner) -> bool {
    if o == me {
        return true;
    }
    let name = proc_name(o);
    let f = match dir.open_file(&name, Create::No) {
        Ok(f) => f,
        Err(e) => return !e.is_missing(),
    };
    match sys::flock(&f, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(true) => {
            reg.reclaim_owners(&[o]);
            let _ = dir.remove(&name);
            false
        }
        Ok(false) | Err(_) => true,
    }
}

/// One bounded sweep by process `me`; `cursor` (the process's own) makes successive
/// sweeps look at different files when there are more than [`FILE_CHECKS`].
pub(crate) fn sweep(dir: &NsDir, reg: &Registry, me: Owner, cursor: &AtomicUsize) -> Swept {
    let mine = proc_name(me);
    let mut names: Vec<(String, Owner)> = dir
        .names()
        .into_iter()
        .filter(|n| *n != mine)
        .filter_map(|n| owner_of_name(&n).map(|o| (n, o)))
        .collect();
    names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let from = if names.is_empty() {
        0
    } else {
        cursor.fetch_add(FILE_CHECKS, Ordering::Relaxed) % names.len()
    };
    let mut dead: Vec<(String, Owner, File)> = Vec::new();
    for k in 0..names.len().min(FILE_CHECKS) {
        let (name, o) = &names[(from + k) % names.len()];
        if let Some(f) = lock_if_dead(dir, name) {
            dead.push((name.clone(), *o, f));
        }
    }
    let owners: Vec<Owner> = dead.iter().map(|d| d.1).collect();
    let mut slots = reg.reclaim_owners(&owners);
    for (name, _, _) in &dead {
        // Still under its lock: a live process's file is never removed.
        let _ = dir.remove(name);
    }
    let files = dead.len();
    drop(dead);
    slots += reg.sweep(me, SLOT_RUN, OWNER_CHECKS, &mut |o| {
        is_alive(dir, reg, me, o)
    });
    Swept { files, slots }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_processes_parse_and_others_do_not() {
        let o = Owner { pid: 12, token: 34 };
        assert_eq!(owner_of_name(&proc_name(o)), Some(o));
        assert_eq!(owner_of_name("tmp-12-34"), Some(o));
        for n in ["registry-2", "proc-12", "proc-x-1", "tmp--1", "other"] {
            assert_eq!(owner_of_name(n), None, "{n}");
        }
    }

    #[test]
    fn a_dead_process_file_and_numbers_are_reclaimed_and_a_live_one_kept() {
        let d = std::env::temp_dir().join(format!("vqp-reclaim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let ns = NsDir::at(&d, sys::euid()).unwrap();
        let reg = Registry::attach(&ns, 2).unwrap();
        let me = Owner { pid: 1, token: 1 };
        let dead = Owner { pid: 2, token: 2 };
        let live = Owner { pid: 3, token: 3 };
        // `live` holds its lock (through another open file description).
        let held = ns.open_file(&proc_name(live), Create::New).unwrap();
        assert!(sys::flock(&held, libc::LOCK_EX | libc::LOCK_NB).unwrap());
        ns.open_file(&proc_name(dead), Create::New).unwrap();
        ns.open_file("tmp-2-5", Create::New).unwrap();
        let orphan = Owner { pid: 4, token: 4 };
        for o in [dead, live, dead, orphan] {
            reg.alloc(o).unwrap();
        }
        let swept = sweep(&ns, &reg, me, &AtomicUsize::new(0));
        assert_eq!(swept, Swept { files: 2, slots: 3 });
        assert_eq!(reg.in_use(), 1);
        let mut left = ns.names();
        left.sort();
        assert_eq!(
            left,
            vec![proc_name(live), super::super::registry::FILE.into()]
        );
        assert!(is_alive(&ns, &reg, me, live));
        assert!(!is_alive(&ns, &reg, me, dead));
        drop(held);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
