//! The budgets of a sink's calls and every client time-out derived from them (docs/kafka.md,
//! "Budgets": the table of each budget, each setting derived from it and its default).
//!
//! A sink is configured with budgets — how long its start-up, a transactional call, the delivery
//! of an epoch's records, one answer of PostgreSQL may take. The clients underneath have time-outs
//! of their own (librdkafka's request and connection set-up time-outs, its reconnect back-off, the
//! wire client's request and set-up deadlines, the bound on one librdkafka call), and their
//! defaults were made for other budgets: librdkafka waits 60 s for a request to a broker that
//! hangs (`socket.timeout.ms`) and 30 s for a connection set-up, while Apache Kafka fences a
//! silent broker after `broker.session.timeout.ms` (9 s by default) and moves its roles. This
//! module is the one rule that derives each of them from the budgets, so that a request to a hung
//! broker is given up and retried on the role's new holder as soon as the cluster has one; the
//! Python side applies what it answers (a user's explicit setting wins: [`KafkaOverrides`]).

use crate::error::{CoreError, CoreResult};

/// librdkafka's `transaction.timeout.ms` when the sink sets none.
pub const LIBRDKAFKA_TRANSACTION_TIMEOUT_MS: u64 = 60_000;
/// A call's bound holds this many request time-outs, so that it rides out a failover within
/// it — the request to the hung broker, the cluster fencing it (Kafka's
/// `broker.session.timeout.ms`, 9 s by default: two or three of them), the retry on the role's
/// new holder — and a second one: 30 s bounds give 3.75 s.
pub const REQUEST_SHARE: u64 = 8;
/// The shortest request time-out derived: a healthy broker answers well within it, even loaded.
pub const REQUEST_MIN_MS: u64 = 2_000;
/// The longest request time-out derived (the Java client's default `request.timeout.ms`).
pub const REQUEST_MAX_MS: u64 = 30_000;
/// The shortest connection set-up deadline (librdkafka refuses less).
pub const SETUP_MIN_MS: u64 = 1_000;
/// The longest connection set-up deadline derived: a broker that accepts connections and never
/// answers (hung, black-holed behind a load balancer) costs a start-up at most this.
pub const SETUP_MAX_MS: u64 = 2_000;
/// How far librdkafka's `socket.timeout.ms` must stay below `transaction.timeout.ms`.
pub const TRANSACTION_MARGIN_MS: u64 = 100;
/// How far a librdkafka transactional call may overrun the time-out it was given: librdkafka
/// returns at its time-out, so anything past a scheduling slack is a call that will not return.
pub const GRACE_MS: u64 = 1_000;
/// librdkafka's first back-off before it retries a request (`retry.backoff.ms`, doubling up to
/// `retry.backoff.max.ms`). Its default, 100 ms, is paid by every epoch that follows another at
/// once: the coordinator answers the new transaction's `AddOffsetsToTxn` with
/// `CONCURRENT_TRANSACTIONS` until the previous one's markers are written, a few ms later, and
/// librdkafka waits the back-off to ask again (measured: an epoch's marker and flush 108 ms
/// right after a commit, 28 ms with 10 ms).
pub const RETRY_BACKOFF_MS: u64 = 10;
/// librdkafka's first back-off before it reconnects to a broker (`reconnect.backoff.ms`,
/// doubling up to `reconnect.backoff.max.ms`). librdkafka also holds any new connection back for
/// half of it (at least 11 ms), and every new client opens one at once: it drops the bootstrap
/// connection once the metadata names the brokers, then connects to the one it needs. With the
/// default, 100 ms, each start-up of a producer and of its marker reader waited 50 ms there
/// (measured: `init_transactions` 120 ms, 25-45 ms with 20).
pub const RECONNECT_BACKOFF_MS: u64 = 20;

/// A Kafka sink's budgets (`KafkaSink(init_timeout_s=…, commit_timeout_s=…, flush_timeout_s=…,
/// transaction_timeout_ms=…)`), in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaBudgets {
    /// Connecting, `init_transactions` and reading the marker at start-up.
    pub init_ms: u64,
    /// One transactional call (`send_offsets_to_transaction`, commit, abort).
    pub commit_ms: u64,
    /// Delivering the epoch's records (prepare's flush).
    pub flush_ms: u64,
    /// `transaction.timeout.ms`, when the sink sets it.
    pub transaction_ms: Option<u64>,
}

/// Client settings the user gave explicitly: each wins over the derived value, and what derives
/// from it derives from the user's value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KafkaOverrides {
    /// The producer's `socket.timeout.ms`.
    pub request_ms: Option<u64>,
    /// The producer's `socket.connection.setup.timeout.ms`.
    pub setup_ms: Option<u64>,
    /// The producer's `reconnect.backoff.ms` (the first back-off).
    pub reconnect_backoff_ms: Option<u64>,
    /// The producer's `reconnect.backoff.max.ms` (the back-off's ceiling).
    pub reconnect_backoff_max_ms: Option<u64>,
}

/// Every client time-out of a Kafka sink, in milliseconds ([`KafkaBudgets::timeouts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaTimeouts {
    /// How long one request may wait for its answer: librdkafka's `socket.timeout.ms` (a request
    /// past it is given up, the connection closed and the role looked up again) and the wire
    /// client's request time-out.
    pub request_ms: u64,
    /// How long a new connection's set-up (TCP, TLS, ApiVersions, SASL) may take: librdkafka's
    /// `socket.connection.setup.timeout.ms` and the wire client's set-up deadline.
    pub setup_ms: u64,
    /// librdkafka's `reconnect.backoff.max.ms`: a broker whose connection failed is tried again
    /// at least this often (librdkafka re-reads a coordinator it waits for when the broker's
    /// state changes; its 10 s default left a call waiting on a dead coordinator that long).
    pub reconnect_backoff_max_ms: u64,
    /// librdkafka's `request.timeout.ms`: how long the partition leader may hold a produce
    /// request waiting for its in-sync replicas — below `request_ms`, so a leader waiting on a
    /// hung follower answers (`REQUEST_TIMED_OUT`, retried) before the client gives up on it.
    pub ack_timeout_ms: u64,
    /// librdkafka's `retry.backoff.ms` (the producer's): [`RETRY_BACKOFF_MS`].
    pub retry_backoff_ms: u64,
    /// librdkafka's `reconnect.backoff.ms`: [`RECONNECT_BACKOFF_MS`], or the back-off's ceiling
    /// when that is lower (librdkafka refuses a first back-off above it); a user's first step
    /// above the derived ceiling raises the ceiling to it.
    pub reconnect_backoff_ms: u64,
    /// How far one librdkafka transactional call may overrun the time-out it was given before
    /// it is taken as stuck and its producer replaced (librdkafka can block past its time-out
    /// when a coordinator it waits for went away: librdkafka #5456).
    pub grace_ms: u64,
    /// `transaction.timeout.ms` in force (the sink's, else librdkafka's 60 s).
    pub transaction_ms: u64,
}

impl KafkaBudgets {
    /// Every client time-out, derived from the budgets (the module's rule), with the user's
    /// explicit settings winning. `CoreError::Config` names a setting that cannot work: a
    /// request time-out librdkafka refuses beside the transaction time-out, a first reconnect
    /// back-off above the user's ceiling.
    pub fn timeouts(&self, overrides: KafkaOverrides) -> CoreResult<KafkaTimeouts> {
        let transaction_ms = self
            .transaction_ms
            .unwrap_or(LIBRDKAFKA_TRANSACTION_TIMEOUT_MS);
        let ceiling = transaction_ms.saturating_sub(TRANSACTION_MARGIN_MS).max(10);
        let request_ms = match overrides.request_ms {
            Some(ms) if ms > ceiling => {
                return Err(CoreError::Config(format!(
                    "producer_config socket.timeout.ms={ms} is refused: librdkafka needs it at \
                     least {TRANSACTION_MARGIN_MS} ms below transaction.timeout.ms \
                     ({transaction_ms}); lower it or remove it"
                )));
            }
            Some(ms) => ms,
            None => (self.init_ms.min(self.commit_ms) / REQUEST_SHARE)
                .clamp(REQUEST_MIN_MS, REQUEST_MAX_MS)
                .min(ceiling),
        };
        let setup_ms = overrides
            .setup_ms
            .unwrap_or_else(|| (request_ms / 4).clamp(SETUP_MIN_MS, SETUP_MAX_MS));
        // librdkafka refuses a first step above the ceiling: what the user set wins and the
        // derived one follows it
        let (reconnect_backoff_ms, reconnect_backoff_max_ms) = match (
            overrides.reconnect_backoff_ms,
            overrides.reconnect_backoff_max_ms,
        ) {
            (Some(first), Some(ceiling)) if first > ceiling => {
                return Err(CoreError::Config(format!(
                    "producer_config reconnect.backoff.ms={first} is above \
                         reconnect.backoff.max.ms={ceiling}, which librdkafka refuses: lower \
                         the first or raise the ceiling (or remove either)"
                )));
            }
            (Some(first), Some(ceiling)) => (first, ceiling),
            (Some(first), None) => (first, setup_ms.max(first)),
            (None, Some(ceiling)) => (RECONNECT_BACKOFF_MS.min(setup_ms).min(ceiling), ceiling),
            (None, None) => (RECONNECT_BACKOFF_MS.min(setup_ms), setup_ms),
        };
        Ok(KafkaTimeouts {
            request_ms,
            setup_ms,
            reconnect_backoff_max_ms,
            ack_timeout_ms: (request_ms * 4 / 5).max(1),
            retry_backoff_ms: RETRY_BACKOFF_MS,
            reconnect_backoff_ms,
            grace_ms: GRACE_MS,
            transaction_ms,
        })
    }
}

impl KafkaTimeouts {
    /// The time-out given to one attempt of a librdkafka transactional call bounded by
    /// `bound_ms`: two request time-outs (a request to the hung holder of a role, then one to
    /// its new holder), never more than the bound. An attempt that times out is resumed by the
    /// next (librdkafka's transactional calls are resumable); one that does not return within
    /// its time-out plus [`KafkaTimeouts::grace_ms`] gives its producer up.
    pub fn attempt_ms(&self, bound_ms: u64) -> u64 {
        bound_ms.min(self.request_ms.saturating_mul(2)).max(1)
    }

    /// The librdkafka settings derived here, as the producer and the marker consumer take them
    /// (each only where the user set none).
    pub fn librdkafka_settings(&self) -> [(&'static str, u64); 6] {
        [
            ("socket.timeout.ms", self.request_ms),
            ("socket.connection.setup.timeout.ms", self.setup_ms),
            ("reconnect.backoff.max.ms", self.reconnect_backoff_max_ms),
            ("reconnect.backoff.ms", self.reconnect_backoff_ms),
            ("request.timeout.ms", self.ack_timeout_ms),
            ("retry.backoff.ms", self.retry_backoff_ms),
        ]
    }
}

/// A librdkafka transactional call, as [`after_attempt`] tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnCall {
    /// `init_transactions`.
    Init,
    /// `send_offsets_to_transaction` (the epoch's marker).
    SendOffsets,
    /// `commit_transaction`.
    Commit,
    /// `abort_transaction`.
    Abort,
}

impl TxnCall {
    /// The call named as confluent-kafka names it.
    pub fn parse(name: &str) -> Option<TxnCall> {
        Some(match name {
            "init_transactions" => TxnCall::Init,
            "send_offsets_to_transaction" => TxnCall::SendOffsets,
            "commit_transaction" => TxnCall::Commit,
            "abort_transaction" => TxnCall::Abort,
            _ => return None,
        })
    }
}

/// What follows a failed attempt of a librdkafka transactional call ([`after_attempt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptNext {
    /// Call again on the same producer (librdkafka's transactional calls are resumable).
    Retry,
    /// Give the producer up and open a new one (the call is then lost: abortable before the
    /// commit).
    Replace,
    /// Raise the error.
    GiveUp,
}

/// After attempt `attempt` (from 1) of transactional call `call` failed. When a marker or an
/// abort ran out its whole time-out (`ran_out`) on silence (`silent`: a request time-out, a
/// connection lost or never set up — no broker answered), the producer is replaced: librdkafka
/// keeps asking the role's holder it cached (it retries a coordinator look-up on the hung broker
/// itself, and waits on a cached group coordinator past its time-out) where a new producer looks
/// every role up afresh, and nothing is lost but an epoch not yet committed. Never the others:
/// `init_transactions` runs on a new producer, which caches nothing (and one replaced then
/// would go on sending its InitProducerId, fencing the next); a commit that ran out is in doubt,
/// and its producer is what recovery retries it on first — a broker that drops a fenced
/// producer's requests (Tansu) is told from a hung one that way, where a new producer would
/// fence the instance that took over. Otherwise a `retriable` error (one the cluster answered:
/// a coordinator moving or loading, the last transaction's markers still being written) is
/// retried on the same producer while retries and time are left (`time_left`), and anything
/// else is given up.
pub fn after_attempt(
    call: TxnCall,
    retriable: bool,
    silent: bool,
    ran_out: bool,
    attempt: u32,
    retries: u32,
    time_left: bool,
) -> AttemptNext {
    let replaceable = matches!(call, TxnCall::SendOffsets | TxnCall::Abort);
    if silent && ran_out && replaceable {
        AttemptNext::Replace
    } else if retriable && attempt <= retries && time_left {
        AttemptNext::Retry
    } else {
        AttemptNext::GiveUp
    }
}

/// The first pause before a call that met a failover asks again (a role moving, no broker
/// answering: the wire client's calls, the start-up's reads through librdkafka's consumer).
pub const FAILOVER_PAUSE_MS: u64 = 50;
/// The longest pause between two such attempts (the pause doubles up to it).
pub const FAILOVER_PAUSE_MAX_MS: u64 = 1_000;

/// What follows attempt `attempt` (from 1) of a call that met a failover, with `left_ms` left of
/// the budget of the operation it belongs to: the pause before the next attempt, or `None` to
/// give up — when the pause would end past the operation's deadline. An operation is what the
/// user gave a budget for, not each call inside it: a sink's whole start-up (connecting,
/// fencing, the marker, the identity, the witness) shares one `init_timeout_s`, so a start-up
/// that meets a failover at every call still ends within it.
pub fn failover_pause(attempt: u32, left_ms: u64) -> Option<u64> {
    let doublings = attempt.saturating_sub(1).min(16);
    let pause = FAILOVER_PAUSE_MS
        .saturating_mul(1 << doublings)
        .min(FAILOVER_PAUSE_MAX_MS);
    (pause < left_ms).then_some(pause)
}

/// The PostgreSQL performer's deadline on one wait for the server's answer (a statement, one
/// chunk of a COPY, the COMMIT), in milliseconds, for a sink whose budget for one answer is
/// `statement_ms` (`PostgresSink(statement_timeout_s=…)`). libpq has no client-side query
/// time-out, and the kernel still acknowledges the socket of a backend that hangs (stopped,
/// swapped out, wedged), so without it a writer would wait forever; past it the connection is
/// given up: what was in flight is lost (`AbortableError`), a COMMIT's outcome unknown
/// (`InDoubtError`, resolved by recovery).
pub fn postgres_answer_ms(statement_ms: u64) -> u64 {
    statement_ms.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budgets(init_s: u64, commit_s: u64) -> KafkaBudgets {
        KafkaBudgets {
            init_ms: init_s * 1_000,
            commit_ms: commit_s * 1_000,
            flush_ms: 120_000,
            transaction_ms: None,
        }
    }

    #[test]
    fn a_failover_pause_doubles_and_never_ends_past_the_operation() {
        assert_eq!(failover_pause(1, 10_000), Some(50));
        assert_eq!(failover_pause(2, 10_000), Some(100));
        assert_eq!(failover_pause(5, 10_000), Some(800));
        assert_eq!(failover_pause(6, 10_000), Some(1_000));
        assert_eq!(failover_pause(u32::MAX, 10_000), Some(1_000));
        assert_eq!(failover_pause(1, 50), None);
        assert_eq!(failover_pause(3, 199), None);
        assert_eq!(failover_pause(3, 201), Some(200));
        assert_eq!(failover_pause(1, 0), None);
    }

    #[test]
    fn the_defaults_give_up_on_a_hung_broker_within_a_failover() {
        let t = budgets(30, 30).timeouts(KafkaOverrides::default()).unwrap();
        assert_eq!(t.request_ms, 3_750);
        assert_eq!(t.setup_ms, SETUP_MIN_MS);
        assert_eq!(t.reconnect_backoff_max_ms, SETUP_MIN_MS);
        assert_eq!(t.ack_timeout_ms, 3_000);
        assert_eq!(t.grace_ms, GRACE_MS);
        assert_eq!(t.transaction_ms, 60_000);
        // two request time-outs per attempt of a call bounded by 30 s
        assert_eq!(t.attempt_ms(30_000), 7_500);
        assert_eq!(t.attempt_ms(3_000), 3_000);
        assert_eq!(
            t.librdkafka_settings(),
            [
                ("socket.timeout.ms", 3_750),
                ("socket.connection.setup.timeout.ms", 1_000),
                ("reconnect.backoff.max.ms", 1_000),
                ("reconnect.backoff.ms", RECONNECT_BACKOFF_MS),
                ("request.timeout.ms", 3_000),
                ("retry.backoff.ms", RETRY_BACKOFF_MS),
            ]
        );
        // never above its ceiling (librdkafka refuses that)
        let tiny = budgets(30, 30).timeouts(KafkaOverrides {
            setup_ms: Some(5),
            ..KafkaOverrides::default()
        });
        assert_eq!(tiny.unwrap().reconnect_backoff_ms, 5);
    }

    #[test]
    fn the_request_time_out_follows_the_shortest_call_within_its_limits() {
        let none = KafkaOverrides::default();
        assert_eq!(budgets(30, 20).timeouts(none).unwrap().request_ms, 2_500);
        assert_eq!(budgets(60, 60).timeouts(none).unwrap().setup_ms, 1_875);
        assert_eq!(
            budgets(5, 30).timeouts(none).unwrap().request_ms,
            REQUEST_MIN_MS
        );
        let long = budgets(600, 600).timeouts(none).unwrap();
        assert_eq!(long.request_ms, REQUEST_MAX_MS);
        assert_eq!(long.setup_ms, SETUP_MAX_MS);
        assert_eq!(budgets(5, 5).timeouts(none).unwrap().setup_ms, SETUP_MIN_MS);
        // below the transaction time-out, as librdkafka requires
        let short = KafkaBudgets {
            transaction_ms: Some(1_000),
            ..budgets(30, 30)
        };
        assert_eq!(short.timeouts(none).unwrap().request_ms, 900);
    }

    #[test]
    fn a_users_setting_wins_and_what_derives_from_it_follows() {
        let t = budgets(30, 30)
            .timeouts(KafkaOverrides {
                request_ms: Some(20_000),
                ..KafkaOverrides::default()
            })
            .unwrap();
        assert_eq!(t.request_ms, 20_000);
        assert_eq!(t.setup_ms, SETUP_MAX_MS);
        assert_eq!(t.attempt_ms(30_000), 30_000);
        let t = budgets(30, 30)
            .timeouts(KafkaOverrides {
                setup_ms: Some(7_000),
                ..KafkaOverrides::default()
            })
            .unwrap();
        assert_eq!((t.request_ms, t.setup_ms), (3_750, 7_000));
        assert_eq!(t.reconnect_backoff_max_ms, 7_000);
    }

    #[test]
    fn the_reconnect_back_offs_first_step_and_ceiling_follow_each_other() {
        let backoff = |first: Option<u64>, ceiling: Option<u64>| {
            budgets(30, 30)
                .timeouts(KafkaOverrides {
                    reconnect_backoff_ms: first,
                    reconnect_backoff_max_ms: ceiling,
                    ..KafkaOverrides::default()
                })
                .map(|t| (t.reconnect_backoff_ms, t.reconnect_backoff_max_ms))
        };
        assert_eq!(backoff(None, None).unwrap(), (RECONNECT_BACKOFF_MS, 1_000));
        assert_eq!(backoff(Some(250), None).unwrap(), (250, 1_000));
        // the user's first step above the derived ceiling raises it, and the other way round
        assert_eq!(backoff(Some(5_000), None).unwrap(), (5_000, 5_000));
        assert_eq!(backoff(None, Some(8)).unwrap(), (8, 8));
        assert_eq!(
            backoff(None, Some(50_000)).unwrap(),
            (RECONNECT_BACKOFF_MS, 50_000)
        );
        assert_eq!(backoff(Some(0), Some(0)).unwrap(), (0, 0));
        // both the user's, out of order: named, not left to librdkafka
        match backoff(Some(5_000), Some(10)) {
            Err(CoreError::Config(m)) => {
                assert!(m.contains("reconnect.backoff.ms=5000"), "{m}");
                assert!(m.contains("reconnect.backoff.max.ms=10"), "{m}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_request_time_out_librdkafka_refuses_is_a_config_error_naming_it() {
        let refused = KafkaBudgets {
            transaction_ms: Some(10_000),
            ..budgets(30, 30)
        }
        .timeouts(KafkaOverrides {
            request_ms: Some(9_950),
            ..KafkaOverrides::default()
        });
        match refused {
            Err(CoreError::Config(m)) => assert!(m.contains("socket.timeout.ms=9950"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_attempt_that_ran_out_on_silence_replaces_the_producer() {
        use AttemptNext::*;
        use TxnCall::*;
        // a marker or an abort no broker answered for the whole attempt: a new producer,
        // whatever the retries left
        assert_eq!(
            after_attempt(SendOffsets, true, true, true, 1, 3, true),
            Replace
        );
        assert_eq!(
            after_attempt(Abort, false, true, true, 9, 3, false),
            Replace
        );
        // a new producer's init is resumed; a commit that ran out stays on its producer
        assert_eq!(after_attempt(Init, true, true, true, 1, 3, true), Retry);
        assert_eq!(after_attempt(Init, true, true, true, 4, 3, true), GiveUp);
        assert_eq!(after_attempt(Commit, true, true, true, 1, 3, true), Retry);
        assert_eq!(after_attempt(Commit, true, true, true, 2, 1, true), GiveUp);
        // a lost connection answered at once (a broker down): the same producer finds the
        // role's new holder itself
        assert_eq!(
            after_attempt(SendOffsets, true, true, false, 1, 3, true),
            Retry
        );
        // an answer from the cluster (CONCURRENT_TRANSACTIONS, a coordinator loading)
        assert_eq!(
            after_attempt(SendOffsets, true, false, true, 3, 3, true),
            Retry
        );
        assert_eq!(
            after_attempt(SendOffsets, true, false, true, 4, 3, true),
            GiveUp
        );
        assert_eq!(
            after_attempt(SendOffsets, true, false, false, 1, 3, false),
            GiveUp
        );
        assert_eq!(
            after_attempt(SendOffsets, false, false, false, 1, 3, true),
            GiveUp
        );
        assert_eq!(TxnCall::parse("commit_transaction"), Some(Commit));
        assert_eq!(TxnCall::parse("produce"), None);
    }

    #[test]
    fn the_postgres_deadline_is_the_statement_budget() {
        assert_eq!(postgres_answer_ms(30_000), 30_000);
        assert_eq!(postgres_answer_ms(0), 1);
    }
}
