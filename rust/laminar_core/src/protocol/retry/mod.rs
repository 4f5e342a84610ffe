//! Every retry, back-off and give-up decision of Laminar, by named budget (docs/kafka.md,
//! "Budgets"; docs/engine.md §2, "retry"). The machines and the Python performers ask these
//! functions and perform the answer (a `Sleep` command, a `time.sleep`, a new producer, a raise);
//! none decides on its own.
//!
//! | budget | what it bounds | rule |
//! | --- | --- | --- |
//! | epoch retries (`retries`, `retry_backoff_s`) | the attempts of one epoch | [`retry_delay_ms`] |
//! | in-doubt recovery | a lone sink's attempts to learn a commit's outcome | [`recover_delay_ms`] |
//! | marker wait | reading the marker back after an accepted `EndTxn` | [`marker_wait_ms`], [`MARKER_POLL_MS`] |
//! | a transactional call (`commit_timeout_s`, …) | one librdkafka call and its retries | [`after_attempt`] |
//! | an operation (`init_timeout_s`: a start-up; a wire call's `retry_for_s`; `EndTxn`) | the calls that meet a failover | [`failover_pause`] |
//! | the clients' time-outs | librdkafka's and the wire client's requests and set-ups | [`KafkaBudgets::timeouts`] |
//! | one answer of PostgreSQL (`statement_timeout_s`) | a wait on the server | [`postgres_answer_ms`] |
//! | the producer identity (`statistics.interval.ms`) | waiting for librdkafka's report of the producer id and epoch | [`identity_wait_ms`] |

mod clients;

pub use clients::{
    AttemptNext, FAILOVER_PAUSE_MAX_MS, FAILOVER_PAUSE_MS, GRACE_MS, KafkaBudgets, KafkaOverrides,
    KafkaTimeouts, LIBRDKAFKA_TRANSACTION_TIMEOUT_MS, RECONNECT_BACKOFF_MS, REQUEST_MAX_MS,
    REQUEST_MIN_MS, REQUEST_SHARE, RETRY_BACKOFF_MS, SETUP_MAX_MS, SETUP_MIN_MS,
    TRANSACTION_MARGIN_MS, TxnCall, after_attempt, failover_pause, postgres_answer_ms,
};

use crate::protocol::RefusalKind;
use crate::protocol::failure::FailureKind;

/// The kind of failure a refusal stands for, as the retry rule sees it: its class is
/// `InDoubtError` (in doubt), `AbortableError` (abortable, the same call may succeed again), or
/// anything else (not retried).
pub fn refusal_failure(kind: RefusalKind) -> FailureKind {
    match kind.error_class() {
        "InDoubtError" => FailureKind::InDoubt,
        "AbortableError" => FailureKind::Abortable { retriable: true },
        _ => FailureKind::Fatal,
    }
}

/// The delay in milliseconds before the next attempt of an epoch whose attempt `attempt`
/// (counted from 1) failed with `failure`, or `None` to give up: after `retries` retries, for a
/// failure that would fail the same way again (an abortable error that is not retriable, such
/// as a record too large; a fenced or fatal one), and for an in-doubt failure while a Kafka sink
/// `awaiting` Spark's replay (only the replay completes it). The delay doubles with each
/// attempt: `backoff_ms * 2^(attempt - 1)`.
pub fn retry_delay_ms(
    attempt: u32,
    retries: u32,
    backoff_ms: u64,
    failure: FailureKind,
    awaiting: bool,
) -> Option<u64> {
    let retryable = match failure {
        FailureKind::Abortable { retriable } => retriable,
        FailureKind::InDoubt => !awaiting,
        FailureKind::Fenced | FailureKind::Fatal => false,
    };
    if !retryable || attempt > retries {
        return None;
    }
    Some(backoff_ms.saturating_mul(1 << attempt.saturating_sub(1).min(20)))
}

/// The longest pause between two in-doubt recovery attempts of a lone sink.
pub const MAX_RECOVER_DELAY_MS: u64 = 10_000;

/// In-doubt recovery of a lone sink's commit (`SingleEpoch`): the pause before the next attempt
/// after attempt `tries` (counted from 1) failed abortably, or `None` once `retries.max(1) * 4`
/// attempts failed (the writer's restart resolves it then). The pause doubles from `backoff_ms`
/// up to [`MAX_RECOVER_DELAY_MS`].
pub fn recover_delay_ms(tries: u32, retries: u32, backoff_ms: u64) -> Option<u64> {
    if tries > retries.max(1).saturating_mul(4) {
        return None;
    }
    Some(
        backoff_ms
            .saturating_mul(1 << tries.saturating_sub(1).min(20))
            .min(MAX_RECOVER_DELAY_MS),
    )
}

/// How long the marker is read again after an accepted `EndTxn` (its markers land shortly after
/// the commit).
pub const MARKER_WAIT_MS: u64 = 3_000;
/// The pause between two reads of the marker while waiting for it.
pub const MARKER_POLL_MS: u64 = 100;

/// How long Kafka recovery waits for a decided epoch's marker after its `EndTxn`: a refused one
/// is not waited for (the marker is read once), an accepted one for [`MARKER_WAIT_MS`].
pub fn marker_wait_ms(end_txn_refused: bool) -> u64 {
    if end_txn_refused { 0 } else { MARKER_WAIT_MS }
}

/// The longest wait for the producer identity.
pub const IDENTITY_WAIT_MAX_MS: u64 = 5_000;

/// How long a Kafka sink waits for librdkafka's first statistics report after an init or an
/// abort (it carries the producer id and epoch a prepared state records), with reports every
/// `statistics_interval_ms`: two intervals and half a second, at most [`IDENTITY_WAIT_MAX_MS`];
/// then the identity is recorded as unknown (-1).
pub fn identity_wait_ms(statistics_interval_ms: u64) -> u64 {
    statistics_interval_ms
        .saturating_mul(2)
        .saturating_add(500)
        .min(IDENTITY_WAIT_MAX_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABORTABLE: FailureKind = FailureKind::Abortable { retriable: true };

    #[test]
    fn the_delay_doubles_until_the_retries_are_spent() {
        assert_eq!(retry_delay_ms(1, 3, 500, ABORTABLE, false), Some(500));
        assert_eq!(retry_delay_ms(2, 3, 500, ABORTABLE, false), Some(1_000));
        assert_eq!(retry_delay_ms(3, 3, 500, ABORTABLE, false), Some(2_000));
        assert_eq!(retry_delay_ms(4, 3, 500, ABORTABLE, false), None);
        assert_eq!(retry_delay_ms(1, 0, 500, ABORTABLE, false), None);
        assert_eq!(
            retry_delay_ms(1, 3, 500, FailureKind::InDoubt, false),
            Some(500)
        );
        // no overflow for absurd settings
        assert_eq!(
            retry_delay_ms(64, 100, u64::MAX, ABORTABLE, false),
            Some(u64::MAX)
        );
    }

    #[test]
    fn what_would_fail_again_is_not_retried() {
        let too_large = FailureKind::Abortable { retriable: false };
        assert_eq!(retry_delay_ms(1, 3, 500, too_large, false), None);
        assert_eq!(retry_delay_ms(1, 3, 500, FailureKind::Fenced, false), None);
        assert_eq!(retry_delay_ms(1, 3, 500, FailureKind::Fatal, false), None);
        // in doubt while a Kafka sink awaits Spark's replay: only the replay completes it
        assert_eq!(retry_delay_ms(1, 3, 500, FailureKind::InDoubt, true), None);
        // an abortable failure is retried even while a sink awaits the replay
        assert_eq!(retry_delay_ms(1, 3, 500, ABORTABLE, true), Some(500));
    }

    #[test]
    fn refusals_retry_by_their_class() {
        for kind in RefusalKind::ALL {
            let failure = refusal_failure(kind);
            assert_eq!(
                retry_delay_ms(1, 3, 10, failure, false).is_some(),
                kind.retryable(),
                "{kind:?}"
            );
            assert_eq!(
                failure == FailureKind::InDoubt,
                kind.error_class() == "InDoubtError"
            );
        }
    }

    #[test]
    fn in_doubt_recovery_doubles_to_its_cap_and_gives_up_after_four_rounds_of_retries() {
        assert_eq!(recover_delay_ms(1, 3, 500), Some(500));
        assert_eq!(recover_delay_ms(2, 3, 500), Some(1_000));
        assert_eq!(recover_delay_ms(6, 3, 500), Some(MAX_RECOVER_DELAY_MS));
        assert_eq!(recover_delay_ms(12, 3, 500), Some(MAX_RECOVER_DELAY_MS));
        assert_eq!(recover_delay_ms(13, 3, 500), None);
        // no retries still leaves four attempts to learn the outcome
        assert_eq!(recover_delay_ms(4, 0, 10), Some(80));
        assert_eq!(recover_delay_ms(5, 0, 10), None);
    }

    #[test]
    fn the_marker_is_waited_for_only_after_an_accepted_end_txn() {
        assert_eq!(marker_wait_ms(false), MARKER_WAIT_MS);
        assert_eq!(marker_wait_ms(true), 0);
    }

    #[test]
    fn the_identity_is_waited_for_two_reports_and_never_past_five_seconds() {
        assert_eq!(identity_wait_ms(100), 700);
        assert_eq!(identity_wait_ms(20), 540);
        assert_eq!(identity_wait_ms(60_000), IDENTITY_WAIT_MAX_MS);
    }
}
