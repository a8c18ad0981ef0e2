//! Every error the core's API returns is a type that says what went wrong in words.

use std::error::Error;

use vqp_core::{CqError, Opcode, PollFailure, PostFailure, PostRecvError, PostSendError, WcStatus};

fn says(e: &dyn Error, words: &str) {
    let text = e.to_string();
    assert!(text.contains(words), "{text:?} should mention {words:?}");
}

#[test]
fn provider_failures_name_the_count_and_the_code() {
    says(
        &PostFailure {
            posted: 3,
            errno: 12,
        },
        "after 3 WQEs (errno 12)",
    );
    says(&PollFailure { errno: 5 }, "errno 5");
}

#[test]
fn inline_refusals_say_what_to_use_instead() {
    says(
        &PostSendError::RawInline,
        "use post_send_inline with a slice",
    );
    says(
        &PostSendError::CannotInline(Opcode::RDMA_READ),
        "RDMA_READ cannot carry an inline payload",
    );
}

#[test]
fn engine_errors_read_as_sentences() {
    says(&PostSendError::ZeroLength, "must not be empty");
    says(&PostSendError::Unsignaled(Opcode::RDMA_WRITE), "RDMA_WRITE");
    says(&PostSendError::MissingKey { device: 2 }, "device 2");
    says(&PostSendError::Failed(WcStatus::WR_FLUSH_ERR), "failed");
    says(&PostRecvError::Failed(WcStatus::WR_FLUSH_ERR), "failed");
    says(&CqError::NoCq(1), "device 1");
    says(
        &CqError::TooSmall {
            device: 0,
            capacity: 8,
            needed: 9,
        },
        "holds 8",
    );
}
