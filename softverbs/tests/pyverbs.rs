//! rdma-core's own test suite — the pyverbs tests Debian's `python3-pyverbs` installs
//! under /usr/share/doc/rdma-core/tests — unmodified, through `softverbs run`: every
//! test either passes or is skipped by the suite itself for a feature the soft devices
//! do not have (mlx5 and EFA direct verbs, Ethernet, ODP, memory windows, XRC, …); none
//! fails and none errs. The skips are listed with their reasons and counts (see
//! softverbs/README.md). Gated on the package: skipped with a line naming it when the
//! suite or pyverbs is missing, failed then under `VQP_REQUIRE_SYSTEM_PACKAGES=1`.

mod procs;
mod system;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const PACKAGE: &str = "python3-pyverbs";
/// Where the package installs the suite (some files gzipped).
const SUITE: &str = "/usr/share/doc/rdma-core/tests";
/// The interpreter pyverbs is built for (Debian's, not one first on `PATH`).
const PYTHON: &str = "/usr/bin/python3";

/// Tests that fail for a part of softverbs being changed elsewhere, with that part.
/// Each must fail here, or the list is stale: a test in it that passes fails this test,
/// naming the entry to remove.
const OWNED_ELSEWHERE: &[(&str, &str)] = &[];

/// Fewer tests passing than this means the suite did not really run.
const MIN_PASSED: usize = 110;

/// The suite in a fresh directory, gunzipped; `None` after skipping when the package
/// (or gzip) is missing.
fn suite(test: &str) -> Option<PathBuf> {
    if !Path::new(SUITE).join("run_tests.py").is_file() {
        system::skip(test, PACKAGE, &format!("{SUITE}/run_tests.py is missing"));
        return None;
    }
    let has_pyverbs = Command::new(PYTHON)
        .args(["-c", "import pyverbs.device"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_pyverbs {
        system::skip(test, PACKAGE, &format!("{PYTHON} cannot import pyverbs"));
        return None;
    }
    system::program(test, "gunzip", "gzip")?;
    let dir = procs::namespace(test).with_extension("suite");
    let tests = dir.join("tests");
    std::fs::create_dir_all(&tests).unwrap();
    for e in std::fs::read_dir(SUITE).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), tests.join(e.file_name())).unwrap();
        }
    }
    let gz: Vec<_> = std::fs::read_dir(&tests)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "gz"))
        .collect();
    if !gz.is_empty() {
        let st = Command::new("gunzip").arg("-f").args(&gz).status().unwrap();
        assert!(st.success(), "gunzip of the suite failed");
    }
    Some(dir)
}

/// What the suite reported.
#[derive(Default, Debug)]
struct Outcome {
    ran: usize,
    passed: usize,
    /// Test ids (`tests.module.Class.test`) that failed or erred.
    broken: Vec<String>,
    /// Skip reason → count.
    skips: BTreeMap<String, usize>,
}

/// Reads unittest's verbose report (stderr).
fn outcome(report: &str) -> Outcome {
    let mut o = Outcome::default();
    for line in report.lines() {
        if line.ends_with(" ... ok") || line == "ok" {
            o.passed += 1;
        } else if let Some(i) = line.find("skipped '") {
            let reason = line[i + 9..].trim_end_matches('\'').to_string();
            *o.skips.entry(reason).or_default() += 1;
        } else if let Some(i) = line.find("skipped \"") {
            let reason = line[i + 9..].trim_end_matches('"').to_string();
            *o.skips.entry(reason).or_default() += 1;
        } else if let Some(rest) = line
            .strip_prefix("FAIL: ")
            .or_else(|| line.strip_prefix("ERROR: "))
        {
            // "test_name (tests.module.Class.test_name)"
            let id = rest
                .split_once('(')
                .map_or(rest, |(_, id)| id.trim_end_matches(')'));
            o.broken.push(id.to_string());
        } else if let Some(n) = line
            .strip_prefix("Ran ")
            .and_then(|r| r.split_whitespace().next())
        {
            o.ran = n.parse().unwrap_or(0);
        }
    }
    o
}

#[test]
fn rdma_cores_pyverbs_suite_passes_or_skips_every_test() {
    let test = "rdma_cores_pyverbs_suite_passes_or_skips_every_test";
    let Some(dir) = suite(test) else {
        return;
    };
    let ns = procs::namespace(test);
    let run = system::run(
        Command::new(env!("CARGO_BIN_EXE_softverbs"))
            .current_dir(&dir)
            .args(["run", "--dir"])
            .arg(&ns)
            .args(["--", PYTHON, "tests/run_tests.py", "-v"]),
        Duration::from_secs(300),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&ns);
    let o = outcome(&run.stderr);
    let mut skips: Vec<_> = o.skips.iter().collect();
    skips.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let list: String = skips
        .iter()
        .map(|(r, n)| format!("  {n:3}  {r}\n"))
        .collect();
    let skipped: usize = o.skips.values().sum();
    eprintln!(
        "pyverbs: ran {}, passed {}, skipped {skipped}:\n{list}",
        o.ran, o.passed
    );
    assert!(
        run.status.is_some(),
        "the suite timed out:\n{}",
        run.describe()
    );
    let unexpected: Vec<_> = o
        .broken
        .iter()
        .filter(|id| !OWNED_ELSEWHERE.iter().any(|(t, _)| t == id))
        .collect();
    assert!(
        unexpected.is_empty(),
        "failed or erred: {unexpected:?}\n{}",
        run.describe()
    );
    for (t, why) in OWNED_ELSEWHERE {
        assert!(
            o.broken.iter().any(|b| b == t),
            "{t} passes now ({why} is done): remove it from OWNED_ELSEWHERE"
        );
    }
    assert!(
        o.passed >= MIN_PASSED && o.ran == o.passed + skipped + o.broken.len(),
        "the suite did not run as expected ({o:?}):\n{}",
        run.describe()
    );
}

#[test]
fn the_report_reader_counts_passes_skips_and_failures() {
    let r = "test_a (tests.t.C.test_a) ... ok\n\
             Test with a docstring ... ok\n\
             test_b (tests.t.C.test_b) ... skipped 'No ODP'\n\
             test_c (tests.t.C.test_c) ... skipped \"Device soft0 doesn't have net\"\n\
             test_d (tests.t.C.test_d) ... FAIL\n\
             ======\n\
             FAIL: test_d (tests.t.C.test_d)\n\
             ERROR: test_e (tests.t.C.test_e)\n\
             Ran 5 tests in 0.1s\n";
    let o = outcome(r);
    assert_eq!((o.ran, o.passed), (5, 2));
    assert_eq!(o.broken, ["tests.t.C.test_d", "tests.t.C.test_e"]);
    assert_eq!(o.skips["No ODP"], 1);
    assert_eq!(o.skips["Device soft0 doesn't have net"], 1);
}
