//! The protocol engine: the coordinators of docs/protocol.md as sans-io state machines
//! (docs/engine.md).
//!
//! A machine never performs I/O. It answers "what next?" with a [`Command`] (begin a Kafka
//! transaction, lock the group's row, record the decision, `EndTxn`, `COMMIT PREPARED`, conclude,
//! reach a crash point, sleep, log a line, ...), the driver performs it and reports the result as
//! an [`Event`] — the clock comes in as an argument of the events that need it. When
//! [`Machine::poll`] returns `None` the machine has ended: [`Machine::end`] says how, and the
//! machine's accessors hold its results. The same machines run in the Python drivers and in the
//! simulation (`sim`, tests only), which walks every [`CrashPoint`].
//!
//! The modules stand in four tiers, and a module uses only its own tier's and the ones below it
//! (docs/engine.md, "Layout"; `tests/unit/test_layout.py` fails on an import that goes up or
//! closes a cycle):
//!
//! 1. **Values** — what the records and the machines talk about: [`state`] (an epoch, a sink's
//!    transaction states and events), [`dt_state`] (the `laminar.dt_state` record's states and
//!    events), [`crash`] (the crash points, named after the step they follow), [`failure`] (how a
//!    command failed: the core's one failure value), [`refusal`] (the core's one way of saying
//!    no, and the generation check).
//! 2. **Rules** — pure functions of recorded state: [`records`] (the decision rows and the small
//!    rules every machine shares: the "already committed" rule, the epoch base, the owner guard),
//!    [`transitions`] (the transition tables of a sink's transaction, `dt_state` and `txn_state`,
//!    and their lookups), [`epoch`] (a sink's per-epoch tracker), [`names`] (the dtid, the
//!    participant names and the one participant-matching rule), [`gid`] (the PostgreSQL gid),
//!    [`retry`] (the one retry rule: whether, and after how long), [`budget`] (every client
//!    time-out derived from a sink's budgets), [`plan`] (which sinks an epoch
//!    is written to).
//! 3. **Effects** — the driver loop's vocabulary: [`command`] (the commands and events), and
//!    [`machine`] (the [`Machine`] trait, how a machine ends, and the one loop every machine runs
//!    on: its own queued commands first, then the machine it runs inside itself).
//! 4. **Machines**, each using only those below it: [`sink`] (a sink's own transaction: begin,
//!    write, prepare, commit, abort, close — the answers the sinks perform; `sink::in_doubt`:
//!    how an epoch enters doubt and is resolved, `KafkaInDoubt`, `PostgresInDoubt`),
//!    [`kafka_recovery`] (bringing Kafka sinks level with the decision log;
//!    `kafka_recovery::completion`: how, per sink), [`single`] (one sink's epoch and its
//!    retries), [`resolution`] (the one
//!    roll-back-and-conclude and the one complete-and-conclude of a distributed transaction),
//!    [`watcher`] (the resolution watcher's pass and the operator's `resolve`;
//!    `watcher::rules`: what to do with each item), [`distributed`] (scale-out: the
//!    coordinator's epoch, the task, the vote and the decision), [`atomic`] (the atomic group:
//!    start-up, the KIP-939 epoch, steps 1–8, and the writer's retries).
//!
//! The simulation (`sim`, tests only) stands on all of them.

pub mod atomic;
pub mod command;
pub mod crash;
pub mod distributed;
pub mod dt_state;
pub mod epoch;
pub mod failure;
pub mod gid;
pub mod kafka_recovery;
pub mod machine;
pub mod names;
pub mod plan;
pub mod records;
pub mod refusal;
pub mod resolution;
pub mod retry;
pub mod single;
pub mod sink;
pub mod state;
pub mod transitions;
pub mod watcher;

#[cfg(test)]
mod sim;

pub use command::{
    Command, CommandKind, DtRow, Event, LogLevel, ParticipantKind, ParticipantResult,
    ParticipantRow, PreparedGid, ResultStatus,
};
pub use crash::{CrashPoint, Protocol};
pub use failure::{Failure, FailureKind};
pub use names::ParticipantDecision;
pub use records::DecisionRow;

pub(crate) use machine::{Core, Idle, NoChild, Steps, children, core_accessors, stalled};
pub use machine::{End, Machine};
pub use refusal::{Refusal, RefusalKind};
pub use state::Epoch;
