//! The whole provider through vqp-host's RAII objects over the in-process table.

mod common;

#[test]
fn rc_connection_runs_every_operation() {
    common::exercise_all_ops(&common::verbs());
}
