//! `write_bw` and `lat` as a user runs them: exit codes and the lines they print, for
//! bad flags, a QP failing mid-run (injected with `VQP_SOFT_FAIL_QP`) and a machine
//! without RDMA devices.
//!
//! The binaries are the examples next to this test (`target/<profile>/examples/`).
//! `cargo test` does not build `write_bw`'s binary (only its unit tests), so the
//! first test to need one runs `cargo build --example write_bw --example lat` with
//! the same profile; when they are fresh that is a no-op.

#[path = "common/cli.rs"]
mod cli;

use std::process::Command;

use cli::{
    alone, count_of, every_message_accounted_for, example, failed_after, json_array, number_after,
    output, profile_dir, refused, text, write_bw,
};

#[test]
fn a_short_run_passes() {
    let out = write_bw("--size 4096 --iters 50", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(
        "data check: 50 messages x 4096 bytes, every byte verified on the server: passed"
    ));
}

#[test]
fn bad_flags_are_one_line_and_exit_code_2() {
    for (args, line) in [
        (
            "--jsn",
            "write_bw: unknown flag --jsn (--help lists them)\n",
        ),
        ("--size 0", "write_bw: --size must be at least 1 byte\n"),
        (
            "--duration 1e-300",
            "write_bw: --duration: 1e-300 s is under the shortest allowed, 0.001 s\n",
        ),
    ] {
        let out = write_bw(args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args}");
        assert_eq!(text(&out.stderr), line, "{args}");
        assert!(out.stdout.is_empty(), "{args}");
    }
}

#[test]
fn the_shortest_duration_still_moves_and_checks_messages() {
    let out = write_bw("--duration 0.001 --size 4096", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let n = number_after(&stdout, "data check: ");
    assert!(n > 0, "{stdout}");
}

/// Every QP of the process fails when it starts its 151st WQE (the server's QPs
/// post no send WQEs, so only the client's fail).
fn fail_at_150() -> String {
    (1..=10)
        .map(|k| format!("nth={k}:150"))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn a_qp_failure_counts_every_message_that_completed() {
    // One data QP, one WQE per message: exactly 150 messages complete, the 151st
    // fails and the rest in flight are flushed.
    let fail = fail_at_150();
    for opcode in ["write", "write_imm", "read"] {
        let out = write_bw(
            &format!("--qps 1 --size 4096 --iters 1000 --opcode {opcode}"),
            &[("VQP_SOFT_FAIL_QP", &fail)],
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{opcode}: {err}");
        assert_eq!(
            number_after(&err, "client: the virtual QP failed after "),
            150,
            "{opcode}: {err}"
        );
        every_message_accounted_for(&err);
        let count = count_of(&err, "client");
        let server = match opcode {
            "read" => format!("server: the client's virtual QP failed after it read {count})\n"),
            _ => format!("server: the client's virtual QP failed after {count}); 150 verified on the server\n"),
        };
        assert!(err.ends_with(&server), "{opcode}: {err}");
    }
}

#[test]
fn a_spray_failure_is_counted_alike_on_both_sides() {
    // The issue's case: SPRAY write_imm over 4 data QPs and a notify QP.
    let out = write_bw(
        "--mode spray --opcode write_imm --size 65537 --iters 2000",
        &[("VQP_SOFT_FAIL_QP", &fail_at_150())],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let client = number_after(&err, "client: the virtual QP failed after ");
    let told = number_after(&err, "server: the client's virtual QP failed after ");
    let verified = number_after(&err, "flushed); ");
    assert_eq!((told, verified), (client, client), "{err}");
    every_message_accounted_for(&err);
    // The notify QP carries one WQE per message and fails first.
    assert_eq!(client, 150, "{err}");
}

/// After a failure anywhere — a QP of either side, at several points, in DQPLB and
/// SPRAY, for each opcode — both sides report the same count: the messages that
/// completed in order, and apart from them those that completed after the first
/// failure and those flushed. `VQP_SOFT_FAIL_QP` gives every QP of the process (both
/// sides', in the order they happen to be created) a different WQE at which it
/// fails: whichever of the client's fails first, its others go on, so messages still
/// complete after the first failure. `--inject` fails a given QP of either side.
#[test]
fn both_sides_report_the_same_count_after_any_failure() {
    let staggered = |first: u64| -> String {
        (1..=10)
            .map(|k| format!("nth={k}:{}", first + 37 * k))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut later = 0;
    for (args, rules) in [
        // The issue's case, and the same failing earlier.
        (
            "--mode dqplb --opcode write_imm --iters 2000 --size 256K --qps 4",
            staggered(150),
        ),
        (
            "--mode dqplb --opcode write_imm --iters 2000 --size 256K --qps 4",
            staggered(20),
        ),
        (
            "--mode spray --opcode write_imm --iters 2000 --size 64K --qps 4",
            staggered(90),
        ),
        (
            "--mode dqplb --opcode write --iters 2000 --size 64K --qps 3",
            staggered(60),
        ),
        (
            "--mode dqplb --opcode read --iters 2000 --size 64K --qps 4",
            staggered(120),
        ),
        (
            "--mode dqplb --opcode write --duration 2 --size 64K --inject 0.05s:fail-qp=1",
            String::new(),
        ),
        (
            "--mode dqplb --opcode write_imm --duration 2 --size 64K --inject 0.3s:server-fail-qp=2",
            String::new(),
        ),
        (
            "--mode spray --opcode read --duration 2 --size 64K --inject 0.3s:fail-qp=0",
            String::new(),
        ),
        (
            "--mode spray --opcode write_imm --duration 2 --size 64K --inject 0.3s:server-fail-notify",
            String::new(),
        ),
    ] {
        let env: Vec<(&str, &str)> = match rules.is_empty() {
            true => vec![],
            false => vec![("VQP_SOFT_FAIL_QP", &rules)],
        };
        let out = write_bw(args, &env);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args}: {err}");
        assert_eq!(
            failed_after(&err, "client"),
            failed_after(&err, "server"),
            "{args}: {err}"
        );
        assert_eq!(count_of(&err, "client"), count_of(&err, "server"), "{args}: {err}");
        let posted = number_after(&err, "messages (of ");
        let prefix = number_after(count_of(&err, "client"), "");
        let after = number_after(&err, "posted, ");
        let flushed = number_after(&err, "after the first failure and ");
        assert_eq!(prefix + after + flushed, posted, "{args}: {err}");
        later += after;
    }
    // What made the two sides' counts differ: messages completing after the failure.
    assert!(
        later > 0,
        "no run had messages complete after its first failure"
    );
}

/// `--devices N`: each side spreads its data QPs over N softverbs devices (the client
/// on soft0.., the server one further); every byte is still checked, each data QP's
/// line names its device, and the JSON counts WQEs per device.
#[test]
fn devices_spread_the_data_qps_and_are_reported() {
    for op in ["write", "write_imm", "read"] {
        let out = write_bw(
            &format!("--devices 2 --size 256K --iters 40 --opcode {op}"),
            &[],
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{op}: {}", text(&out.stderr));
        assert!(
            stdout.contains("soft0+soft1 -> soft1+soft2 in one process"),
            "{stdout}"
        );
        for line in [
            " data QP 0 (soft0): ",
            " data QP 1 (soft1): ",
            " data QP 3 (soft1): ",
        ] {
            assert!(stdout.contains(line), "{op}: {stdout}");
        }
        assert!(stdout.contains(": passed"), "{op}: {stdout}");
    }
    let out = write_bw("--devices 2 --qps 3 --size 64K --iters 20 --json", &[]);
    let json = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        json.contains(r#""devices":["soft0","soft1"],"wqes_per_device":["#),
        "{json}"
    );
    for (args, says) in [
        ("--devices 3 --qps 2", "no more than --qps"),
        ("--devices 5", "between 1 and 4"),
        (
            "--device mlx5_0 --devices 2",
            "--devices 2 with --device naming 1",
        ),
        ("--device mlx5_0,,mlx5_1", "an empty device name"),
        ("--device mlx5_0,mlx5_0", "mlx5_0 named twice"),
        ("--device a,b,c,d,e --qps 8", "5 devices, at most 4"),
        ("--device mlx5_0,mlx5_1 --qps 1", "no more than --qps"),
    ] {
        refused(args, says);
    }
}

/// `--inject`: a rate change during the run is carried out (and told) and the run
/// still checks every byte; a link going down fails the run, every message accounted
/// for; bad items are refused, as is `--inject` on real hardware.
#[test]
fn link_events_are_injected_during_the_run() {
    let out = write_bw(
        "--size 64K --duration 0.3 --inject 0.05s:rate=soft0:50M,0.2s:rate=soft0:0",
        &[],
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("s: soft0's link runs at 50 MB/s"), "{err}");
    assert!(err.contains("s: soft0's link is unlimited"), "{err}");
    assert!(text(&out.stdout).contains("every byte verified on the server: passed"));

    let out = write_bw("--size 64K --duration 2 --inject 0.1s:link-down=soft0", &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("s: soft0's link goes down"), "{err}");
    assert!(err.contains("transport retry counter exceeded"), "{err}");
    every_message_accounted_for(&err);

    // A data QP of the client failing (as a fatal QP error) fails the run likewise.
    let out = write_bw("--size 64K --duration 2 --inject 0.1s:fail-qp=1", &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("s: the client's data QP 1 fails"), "{err}");
    every_message_accounted_for(&err);

    for (args, says) in [
        ("--inject 1s:rate=soft0", "rate takes softN:RATE"),
        ("--inject soon:link-down=soft0", "the time is not like"),
        (
            "--device mlx5_0 --inject 1s:link-down=soft0",
            "--inject drives softverbs' link controls",
        ),
    ] {
        refused(args, says);
    }
}

#[test]
fn no_rdma_device_says_so_and_points_to_softverbs() {
    // softverbs as libibverbs, with no device: what a machine without RDMA looks like.
    let lib = profile_dir().join("deps").join("libvqp_softverbs.so");
    let _ = example("write_bw");
    assert!(lib.exists(), "{} is missing", lib.display());
    let out = write_bw(
        "--device mlx5_0",
        &[
            ("VQP_IBVERBS_PATH", lib.to_str().expect("a UTF-8 path")),
            ("VQP_SOFT_DEVICES", "0"),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "write_bw: --device mlx5_0: this machine has no RDMA device (libibverbs lists none); \
         leave out --device to run both sides in this process on softverbs, the software RDMA \
         provider built with this program\n"
    );
}

#[test]
fn lat_takes_the_same_byte_counts() {
    let out = output(
        Command::new(example("lat"))
            .args(["--size", "4K", "--iters", "20", "--warmup", "2", "--json"]),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("\"bytes\":4096,"),
        "{}",
        text(&out.stdout)
    );
    let out = output(Command::new(example("lat")).args(["--size", "4X"]));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), "lat: --size: '4X' is not a byte count\n");
}

/// `--policy` over unequal links (two data QPs per device): under every policy each
/// message completes once and in order with every byte verified, and each device's
/// bytes add up; how the bytes split follows the policy (round-robin: about equal;
/// weighted, from the ports' bandwidths, soft0 at 25 MB/s and soft1 at 75 MB/s: three
/// to one; the load-aware ones, soft0 at 5 MB/s and soft1 at 95 MB/s: more on the
/// faster link). The shares, not the timings.
#[test]
fn striping_policies_over_unequal_links() {
    const MESSAGES: u64 = 120;
    const SIZE: u64 = 256 << 10;
    // The shares of the load-aware policies follow the links only while the links,
    // not the CPU, are the limit: no other test's programs run meanwhile.
    alone(|| policies_over_unequal_links(MESSAGES, SIZE));
    for (args, says) in [
        ("--policy fast", "--policy: 'fast' is not rr, weighted"),
        (
            "--devices 2 --weights 1",
            "--weights gives 1 weights for 2 devices",
        ),
        ("--weights 0", "--weights: '0' is not a positive integer"),
    ] {
        refused(args, says);
    }
}

/// The four policies over the rated links, each run's shares checked (see
/// [`striping_policies_over_unequal_links`]).
fn policies_over_unequal_links(base: u64, size: u64) {
    for policy in ["rr", "weighted", "outstanding", "adaptive"] {
        // The load-aware policies see a link only once it is the limit: where the CPU
        // is (a busy machine moved 40-55 MB/s here), links of 25 and 75 MB/s both keep
        // up with their shares and the shares come out alike, so their slow link is
        // one that cannot. They start from equal shares, and the slow QPs' first
        // backlog (64 WQEs of 64 KiB each) takes more than a second to drain at 5 MB/s:
        // they run longer, so that what they learn shows.
        let (messages, rates) = if policy == "rr" || policy == "weighted" {
            (base, "soft0=25M,soft1=75M")
        } else {
            (4 * base, "soft0=5M,soft1=95M")
        };
        let out = write_bw(
            &format!("--devices 2 --size 256K --iters {messages} --policy {policy} --json"),
            &[("VQP_SOFT_RATE", rates)],
        );
        let json = text(&out.stdout);
        assert!(out.status.success(), "{policy}: {}", text(&out.stderr));
        assert!(json.contains(&format!("\"policy\":\"{policy}\"")), "{json}");
        assert!(
            json.contains(&format!("\"iterations\":{messages},")),
            "{json}"
        );
        assert!(json.contains("\"data_check\":\"passed\""), "{json}");
        let per_device = json_array(&json, "bytes_per_device");
        let [slow, fast] = per_device[..] else {
            panic!("{policy}: two devices: {json}")
        };
        assert_eq!(slow + fast, messages * size, "{policy}: {json}");
        match policy {
            // Equal turns; a QP that is full is passed over, so not quite to the byte.
            "rr" => assert!(slow.abs_diff(fast) <= base * size / 20, "{json}"),
            "weighted" => {
                // 200 and 600 Mb/s, the links' effective bandwidths.
                assert_eq!(json_array(&json, "weights_per_qp"), [200, 600, 200, 600]);
                let ratio = fast as f64 / slow as f64;
                assert!((2.7..=3.3).contains(&ratio), "{ratio}: {json}");
            }
            _ => assert!(fast > slow * 3 / 2, "{policy}: {json}"),
        }
    }
}

/// `--failover`: both sides survive data QPs failing mid-run (the client's QP 1, then
/// the server's QP 2, which the client's QP 2 meets as a dead responder): every
/// message is still verified, both QPs are replaced, and the JSON says what was
/// survived. Without it the same run fails as before (exit 2, naming the failure),
/// and so does a failover run that loses every path for longer than its grace period
/// (each client QP is on soft0, whose link goes down for good).
#[test]
fn failover_survives_failed_qps_and_still_verifies_every_byte() {
    let inject = "--inject 0.2s:fail-qp=1,0.4s:server-fail-qp=2";
    for op in ["write_imm", "write", "read"] {
        // The client's QP 2 learns of the server's failure only when its retries run
        // out (about 0.55 s at the default timeout and retry count), and is replaced
        // after that: the run lasts long enough for a loaded machine to do both
        // (fresh-clone CI at 0.8 s: one run ended with one QP restored of two).
        let out = write_bw(
            &format!("--failover --opcode {op} --size 64K --duration 2 {inject} --json"),
            &[],
        );
        let json = text(&out.stdout);
        assert!(out.status.success(), "{op}: {}", text(&out.stderr));
        assert!(json.contains("\"data_check\":\"passed\""), "{json}");
        assert!(number_after(&json, "\"failovers\":") >= 2, "{op}: {json}");
        // Both were replaced (fail-back): the run ends at full width.
        assert!(number_after(&json, "\"restored\":") >= 2, "{op}: {json}");
        assert_eq!(number_after(&json, "\"healthy_qps\":"), 4, "{op}: {json}");
        assert!(number_after(&json, "\"iterations\":") > 0, "{json}");
    }
    let failed = "the virtual QP failed after";
    refused(&format!("--size 64K --duration 0.8 {inject}"), failed);
    refused(
        "--failover --grace 0.3 --size 64K --duration 0.8 --inject 0.2s:link-down=soft0",
        failed,
    );
}

/// The failover scenario of record: three data QPs fail one after the other (two at
/// the client, one at the server) and are replaced, then the client's only device
/// loses its link for a second, taking every path; the virtual QP holds its requests,
/// replaces every QP when the link returns, ends at full width and every byte is
/// verified. Without `--failover` the first failure ends the run; with a grace period
/// and a link that does not come back the run ends naming the paths it lost.
#[test]
fn a_virtual_qp_rides_out_a_link_outage_and_comes_back_to_full_width() {
    let inject =
        "--inject 1s:fail-qp=1,2s:fail-qp=2,3s:server-fail-qp=3,4s:link-down=soft0,5s:link-up=soft0";
    let out = write_bw(
        &format!("--failover --duration 6 --qps 4 {inject} --json"),
        &[],
    );
    let json = text(&out.stdout);
    assert!(out.status.success(), "{}{json}", text(&out.stderr));
    assert!(json.contains("\"data_check\":\"passed\""), "{json}");
    assert!(number_after(&json, "\"failovers\":") >= 3, "{json}");
    assert!(number_after(&json, "\"restored\":") >= 4, "{json}");
    assert_eq!(number_after(&json, "\"healthy_qps\":"), 4, "{json}");
    refused(
        &format!("--duration 6 --qps 4 {inject}"),
        "the virtual QP failed after",
    );
    // The link does not come back: however late a busy machine lets the client see the
    // outage, it outlasts the grace period.
    let for_good = inject.trim_end_matches(",5s:link-up=soft0");
    let out = write_bw(
        &format!("--failover --grace 0.5 --duration 6 --qps 4 {for_good}"),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("every path was lost (data QPs 0, 1, 2, 3 on soft0)")
            && err.contains("within the 0.5 s grace period"),
        "{err}"
    );
    refused("--grace 1", "give --failover too");
}

/// SPRAY's notify QP failing, on either side, and a link outage: a notify cannot
/// simply be sent again (it carries the application's immediate), so the notify QP
/// pair is replaced once both sides counted what arrived on it, and the run goes on
/// with every message notified once and every byte verified.
#[test]
fn a_spray_virtual_qp_rides_out_its_notify_qp_failing_on_either_side() {
    for (inject, survived) in [
        // The notify QP, then data QPs 0 and 1 (and the notify QP again if it had a
        // notify in flight when the link went).
        ("1s:fail-notify,2s:link-down=soft0,2.5s:link-up=soft0", 3),
        // The server's: the client's fails when it next sends to it.
        ("1s:server-fail-notify", 1),
    ] {
        let out = write_bw(
            &format!("--failover --mode spray --duration 3 --qps 2 --inject {inject} --json"),
            &[],
        );
        let json = text(&out.stdout);
        assert!(
            out.status.success(),
            "{inject}: {}{json}",
            text(&out.stderr)
        );
        assert!(json.contains("\"data_check\":\"passed\""), "{json}");
        assert!(number_after(&json, "\"failovers\":") >= survived, "{json}");
        assert!(number_after(&json, "\"restored\":") >= survived, "{json}");
        assert_eq!(number_after(&json, "\"healthy_qps\":"), 2, "{json}");
    }
}

/// `lat` places each side's application thread on a core of its own when asked, and
/// refuses, with exit code 2 and a line saying why, a placement that cannot finish: two
/// spinning threads on one core, or an application core with `--direct`.
#[test]
fn lat_gives_application_threads_cores_of_their_own_and_refuses_two_spinners_on_one() {
    let lat = |args: &str| output(Command::new(example("lat")).args(args.split_whitespace()));
    // Two cores: each application thread on the other side's poll thread's core.
    let out = lat("--iters 50 --warmup 5 --client-app-core 1 --server-app-core 0");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("application cores 1 and 0, idle yield"),
        "{stdout}"
    );
    assert!(stdout.contains("verified: passed"), "{stdout}");
    for (args, says) in [
        (
            "--idle spin",
            "the client's poll thread and the client's application thread would both spin on core 0",
        ),
        (
            "--idle spin --client-app-core 1",
            "the server's poll thread and the client's application thread would both spin on core 1",
        ),
        (
            "--direct --server-core 0",
            "the client's application thread and the server's application thread would both spin on core 0",
        ),
        ("--direct --client-app-core 1", "--direct has none"),
    ] {
        let out = lat(args);
        assert_eq!(out.status.code(), Some(2), "{args}");
        let err = text(&out.stderr);
        assert!(err.contains(says) && err.lines().count() == 1, "{args}: {err}");
    }
}

/// `--inject` targets the run cannot have are refused before anything runs, one line
/// naming the item and what the run has: a data QP at or above `--qps` (either side),
/// a notify QP in a run without one, a device the run does not use, and, with
/// `--duration`, a time at or after the run's end.
#[test]
fn inject_targets_the_run_cannot_have_are_refused() {
    for (args, says) in [
        (
            "--inject 1s:fail-qp=99",
            "--inject 1s:fail-qp=99: the run has data QPs 0 to 3 (--qps 4)",
        ),
        (
            "--qps 4 --inject 1s:server-fail-qp=4",
            "--inject 1s:server-fail-qp=4: the run has data QPs 0 to 3 (--qps 4)",
        ),
        (
            "--inject 1s:rate=soft9:1G",
            "--inject 1s:rate=soft9:1G: the run uses soft0 to soft1",
        ),
        (
            "--devices 2 --inject 0.5s:link-down=soft3",
            "--inject 0.5s:link-down=soft3: the run uses soft0 to soft2",
        ),
        (
            "--mode dqplb --inject 1s:fail-notify",
            "--inject 1s:fail-notify: the run has no notify QP",
        ),
        (
            "--mode spray --qps 1 --inject 1s:server-fail-notify",
            "--inject 1s:server-fail-notify: the run has no notify QP",
        ),
        (
            "--duration 0.5 --inject 0.1s:link-up=soft0,2s:fail-qp=1",
            "--inject 2s:fail-qp=1: 2 s is not before the run's end (0.5 s, --duration)",
        ),
    ] {
        let out = write_bw(args, &[]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args}: {err}");
        assert!(
            err.starts_with(&format!("write_bw: {says}")) && err.lines().count() == 1,
            "{args}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args}");
    }
}

/// An `--iters` run that ends before an injection's time says so when it ends (its
/// length is not known when the flags are checked); what happened is not told again.
#[test]
fn an_injection_the_run_ends_before_is_told() {
    let out = write_bw(
        "--size 4096 --iters 50 --inject 0s:rate=soft0:0,30s:fail-qp=1,40s:link-down=soft1",
        &[],
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("s: soft0's link is unlimited"), "{err}");
    for item in ["30s:fail-qp=1", "40s:link-down=soft1"] {
        assert!(
            err.contains(&format!(
                "write_bw: --inject {item} did not happen: the run ended after "
            )),
            "{err}"
        );
    }
    assert_eq!(err.matches("did not happen").count(), 2, "{err}");
}
