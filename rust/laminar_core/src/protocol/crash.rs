//! The crash points: every place where the tests kill a writer, named after the step they follow
//! (docs/engine.md, "Crash points").
//!
//! A point of a coordinator protocol (atomic, recovery, scale-out) is a [`super::Command::Reached`]
//! the machine emits right after the command [`CrashPoint::after`] names succeeded; a point of a
//! sink protocol (kafka, postgres) is reached inside that sink operation, by the sink itself.
//! The Rust simulation walks [`CrashPoint::ALL`]; the Python crash tests enumerate the same list
//! (`laminar._core.CrashPoint.all()`), so a new point is walked by both without further edits.

use std::fmt;

/// The protocol a crash point belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// The atomic group: start-up and the epoch (docs/protocol.md §3).
    Atomic,
    /// Bringing Kafka sinks level with the decision log (§3, "Recovery").
    Recovery,
    /// Scale-out: the coordinator and the tasks (§4).
    Scaleout,
    /// A Kafka sink's own transaction (§1).
    Kafka,
    /// A PostgreSQL sink's own transaction (§2).
    Postgres,
}

impl Protocol {
    /// Every protocol.
    pub const ALL: [Protocol; 5] = [
        Protocol::Atomic,
        Protocol::Recovery,
        Protocol::Scaleout,
        Protocol::Kafka,
        Protocol::Postgres,
    ];

    /// The name (the prefix of its points' names).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Atomic => "atomic",
            Protocol::Recovery => "recovery",
            Protocol::Scaleout => "scaleout",
            Protocol::Kafka => "kafka",
            Protocol::Postgres => "postgres",
        }
    }

    /// Parses a name.
    pub fn from_name(name: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// When a run reaches a crash point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Once per start of a writer (the atomic group's fencing).
    Start,
    /// Once per epoch written (a coordinator's step, or a sink's own step).
    Epoch,
    /// Only when something is resolved: a decided epoch brought level (EndTxn, redo), a
    /// distributed transaction rolled back.
    Recovery,
    /// Once per scale-out task attempt.
    Task,
}

impl Phase {
    /// The name as the bindings spell it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Start => "start",
            Phase::Epoch => "epoch",
            Phase::Recovery => "recovery",
            Phase::Task => "task",
        }
    }
}

/// Where a crash point is, relative to its command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// Right after the command succeeded (the machine emits the point).
    After,
    /// Inside the operation (the sink reaches it itself, e.g. halfway through the rows).
    Within,
}

macro_rules! crash_points {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $protocol:ident, $position:ident $after:literal, $phase:ident, $decided:literal; )*) => {
        /// A crash point (module docs).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum CrashPoint {
            $( $(#[$doc])* $variant, )*
        }

        impl CrashPoint {
            /// Every crash point, protocol by protocol, in the order a run reaches them.
            pub const ALL: &'static [CrashPoint] = &[ $( CrashPoint::$variant, )* ];

            /// The name (`<protocol>.<step>`), as `LAMINAR_CRASH_AT` takes it.
            pub fn name(self) -> &'static str {
                match self { $( CrashPoint::$variant => $name, )* }
            }

            /// The protocol it belongs to.
            pub fn protocol(self) -> Protocol {
                match self { $( CrashPoint::$variant => Protocol::$protocol, )* }
            }

            /// The command ([`super::Command::kind`]) it follows, or the sink operation it is
            /// inside.
            pub fn after(self) -> &'static str {
                match self { $( CrashPoint::$variant => $after, )* }
            }

            /// After its command, or within it.
            pub fn position(self) -> Position {
                match self { $( CrashPoint::$variant => Position::$position, )* }
            }

            /// When a run reaches it ([`Phase`]).
            pub fn phase(self) -> Phase {
                match self { $( CrashPoint::$variant => Phase::$phase, )* }
            }

            /// Whether what the point's run writes is decided (committed) by the time it is
            /// reached: a writer killed here and restarted finds its epoch committed, and the
            /// replay of that epoch is skipped. Recovery points resolve an epoch decided earlier.
            pub fn decided(self) -> bool {
                match self { $( CrashPoint::$variant => $decided, )* }
            }
        }
    };
}

crash_points! {
    /// Start-up: the generation was bumped (the previous coordinator is fenced).
    AtomicAfterFence = "atomic.after_fence", Atomic, After "bump_generation", Start, false;
    /// Step 1: the decision transaction holds the group's row lock; generation checked.
    AtomicAfterLock = "atomic.after_lock", Atomic, After "lock_group", Epoch, false;
    /// Step 2: every Kafka sink's transaction is open.
    AtomicAfterKafkaBegin = "atomic.after_kafka_begin", Atomic, After "sink_begin", Epoch, false;
    /// Step 3: every record is produced.
    AtomicAfterProduce = "atomic.after_produce", Atomic, After "sink_write", Epoch, false;
    /// Step 4: Kafka is prepared (markers sent, flushed).
    AtomicAfterKafkaPrepare = "atomic.after_kafka_prepare", Atomic, After "sink_prepare", Epoch, false;
    /// Step 5: the rows (and the redo records) are in the decision transaction.
    AtomicAfterRows = "atomic.after_rows", Atomic, After "replace_redo", Epoch, false;
    /// Step 6: the decision rows (`txn_state`) are in the decision transaction.
    AtomicAfterDecisionRows = "atomic.after_decision_rows", Atomic, After "record_decision", Epoch, false;
    /// Step 7: the decision committed; Kafka is still prepared.
    AtomicAfterDecision = "atomic.after_decision", Atomic, After "commit_decision", Epoch, true;
    /// Step 8: Kafka committed (or failed to, and is completed next).
    AtomicAfterKafkaCommit = "atomic.after_kafka_commit", Atomic, After "sink_commit", Epoch, true;

    /// Recovery: an `EndTxn` was sent (accepted or not).
    RecoveryAfterEndTxn = "recovery.after_end_txn", Recovery, After "end_txn", Recovery, true;
    /// Recovery: the new producers are initialised (open transactions aborted).
    RecoveryAfterInit = "recovery.after_init", Recovery, After "init_sink", Recovery, true;
    /// Recovery: the first redo blob is produced, the redo transaction is open.
    RecoveryMidRedo = "recovery.mid_redo", Recovery, After "produce_redo", Recovery, true;
    /// Recovery: the redo transaction committed; its redo rows are not deleted yet.
    RecoveryAfterRedoCommit = "recovery.after_redo_commit", Recovery, After "sink_commit", Recovery, true;

    /// Scale-out: the decision record exists (`prepare`), no task ran.
    ScaleoutAfterCreate = "scaleout.after_create", Scaleout, After "create_dt", Epoch, false;
    /// Scale-out: the tasks ran and prepared; no decision.
    ScaleoutAfterTasks = "scaleout.after_tasks", Scaleout, After "run_tasks", Epoch, false;
    /// Scale-out: the decision (`commit`) committed; no participant completed.
    ScaleoutAfterDecision = "scaleout.after_decision", Scaleout, After "commit_decision", Epoch, true;
    /// Scale-out: the first PostgreSQL participant is committed.
    ScaleoutMidCompletion = "scaleout.mid_completion", Scaleout, After "commit_prepared", Epoch, true;
    /// Scale-out: a rollback is recorded (`rollback`); no participant rolled back yet.
    ScaleoutAfterSetRollback = "scaleout.after_set_rollback", Scaleout, After "set_dt_state", Recovery, false;
    /// Scale-out task: the partition is claimed.
    ScaleoutTaskAfterClaim = "scaleout.task_after_claim", Scaleout, After "claim_participants", Task, false;
    /// Scale-out task: the rows are written, nothing prepared.
    ScaleoutTaskBeforePrepare = "scaleout.task_before_prepare", Scaleout, After "write_partition", Task, false;
    /// Scale-out task: every participant is prepared; no result returned.
    ScaleoutTaskAfterPrepare = "scaleout.task_after_prepare", Scaleout, After "sink_prepare", Task, false;

    /// Kafka sink: the transaction is open.
    KafkaAfterBegin = "kafka.after_begin", Kafka, After "sink_begin", Epoch, false;
    /// Kafka sink: half of the first chunk is produced.
    KafkaMidProduce = "kafka.mid_produce", Kafka, Within "sink_write", Epoch, false;
    /// Kafka sink: the epoch marker is sent, not flushed.
    KafkaAfterMarkers = "kafka.after_markers", Kafka, Within "sink_prepare", Epoch, false;
    /// Kafka sink: every record is acknowledged (prepared).
    KafkaAfterFlush = "kafka.after_flush", Kafka, Within "sink_prepare", Epoch, false;
    /// Kafka sink: committed.
    KafkaAfterCommit = "kafka.after_commit", Kafka, After "sink_commit", Epoch, true;

    /// PostgreSQL sink: the epoch is claimed in `laminar.sink_epochs`.
    PostgresAfterClaim = "postgres.after_claim", Postgres, After "sink_begin", Epoch, false;
    /// PostgreSQL sink: a COPY chunk is sent.
    PostgresMidCopy = "postgres.mid_copy", Postgres, Within "sink_write", Epoch, false;
    /// PostgreSQL sink: the epoch's totals are recorded, `PREPARE TRANSACTION` not sent.
    PostgresBeforePrepare = "postgres.before_prepare", Postgres, Within "sink_prepare", Epoch, false;
    /// PostgreSQL sink: prepared.
    PostgresAfterPrepare = "postgres.after_prepare", Postgres, After "sink_prepare", Epoch, false;
    /// PostgreSQL sink: the epoch's totals are recorded, `COMMIT` not sent.
    PostgresBeforeCommit = "postgres.before_commit", Postgres, Within "sink_commit", Epoch, false;
    /// PostgreSQL sink: committed (`COMMIT` or `COMMIT PREPARED`).
    PostgresAfterCommit = "postgres.after_commit", Postgres, After "sink_commit", Epoch, true;
}

impl CrashPoint {
    /// The points of one protocol, in order.
    pub fn for_protocol(protocol: Protocol) -> Vec<CrashPoint> {
        CrashPoint::ALL
            .iter()
            .copied()
            .filter(|p| p.protocol() == protocol)
            .collect()
    }

    /// The point a name denotes.
    pub fn from_name(name: &str) -> Option<CrashPoint> {
        CrashPoint::ALL.iter().copied().find(|p| p.name() == name)
    }

    /// Whether a scale-out point is reached in a task (not in the coordinator).
    pub fn in_task(self) -> bool {
        self.phase() == Phase::Task
    }
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_are_unique_prefixed_by_their_protocol_and_carry_no_step_numbers() {
        let mut names = BTreeSet::new();
        for p in CrashPoint::ALL {
            assert!(names.insert(p.name()), "{p} twice");
            let (protocol, step) = p.name().split_once('.').expect("dotted");
            assert_eq!(Protocol::from_name(protocol), Some(p.protocol()));
            assert!(!step.chars().any(|c| c.is_ascii_digit()), "{p}");
            assert_eq!(CrashPoint::from_name(p.name()), Some(*p));
        }
        assert_eq!(CrashPoint::from_name("atomic.step7"), None);
    }

    #[test]
    fn an_epochs_decided_points_follow_its_undecided_ones() {
        for protocol in Protocol::ALL {
            let epoch: Vec<bool> = CrashPoint::for_protocol(protocol)
                .into_iter()
                .filter(|p| p.phase() == Phase::Epoch)
                .map(CrashPoint::decided)
                .collect();
            let first = epoch.iter().position(|d| *d).unwrap_or(epoch.len());
            assert!(epoch[first..].iter().all(|d| *d), "{protocol:?}: {epoch:?}");
        }
        assert!(CrashPoint::AtomicAfterDecision.decided());
        assert!(!CrashPoint::AtomicAfterDecisionRows.decided());
        assert_eq!(CrashPoint::AtomicAfterFence.phase(), Phase::Start);
        assert!(CrashPoint::ScaleoutTaskAfterClaim.in_task());
    }

    #[test]
    fn every_protocol_has_points_and_every_point_names_a_command() {
        for protocol in Protocol::ALL {
            assert!(
                !CrashPoint::for_protocol(protocol).is_empty(),
                "{protocol:?}"
            );
        }
        let total: usize = Protocol::ALL
            .iter()
            .map(|p| CrashPoint::for_protocol(*p).len())
            .sum();
        assert_eq!(total, CrashPoint::ALL.len());
        for p in CrashPoint::ALL {
            assert!(!p.after().is_empty());
        }
    }
}
