//! The one retry rule of an epoch (docs/engine.md §2, "retry"): whether a failed attempt is
//! tried again, and after how long. The atomic group's machine, one sink's epoch and the
//! writer's scale-out loop (through the binding) all ask [`retry_delay_ms`].

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
}
