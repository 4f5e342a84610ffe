//! The protocol engine: the coordinators of docs/protocol.md as sans-io state machines
//! (docs/engine.md).
//!
//! A machine never performs I/O. It answers "what next?" with a [`Command`] (begin a Kafka
//! transaction, lock the group's row, record the decision, `EndTxn`, `COMMIT PREPARED`, conclude,
//! reach a crash point, sleep, log a line, ...), the driver performs it and reports the result as
//! an [`Event`] — the clock comes in as an argument of the events that need it. When
//! [`Machine::poll`] returns `None` the machine has ended: [`Machine::end`] says how, and the
//! machine's accessors hold its results. The same machines run in the Python drivers and in the
//! simulation ([`sim`], tests only), which walks every [`CrashPoint`].
//!
//! - [`atomic`]: the atomic group (start-up, the KIP-939 epoch, steps 1–8, and the writer's
//!   retries), [`kafka_recovery`]: bringing Kafka sinks level with the decision log;
//! - [`distributed`]: scale-out (the coordinator's epoch, the task, and the one definition each of
//!   roll-back-and-conclude and complete-and-conclude);
//! - [`watcher`]: the resolution watcher's pass and the operator's `resolve`;
//! - [`single`]: one sink's epoch and its in-doubt resolution (Kafka, PostgreSQL);
//! - [`records`]: the transition tables of `dt_state` and `txn_state` and the small rules every
//!   machine shares (the "already committed" rule, the epoch base, the owner guard, participant
//!   names and matching);
//! - [`crash`]: the crash points, named after the step they follow.

pub mod atomic;
pub mod command;
pub mod crash;
pub mod distributed;
pub mod kafka_recovery;
pub mod names;
pub mod records;
pub mod single;
pub mod watcher;

#[cfg(test)]
mod sim;

pub use command::{
    Command, DecisionRow, DtRow, Event, Failure, FailureKind, LogLevel, ParticipantDecision,
    ParticipantKind, ParticipantResult, ParticipantRow, PreparedGid, ResultStatus,
};
pub use crash::{CrashPoint, Protocol};

use std::collections::VecDeque;

pub use crate::recovery::{Epoch, Refusal, RefusalKind};

/// How a machine ended.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// Done as asked; the machine's accessors hold the results.
    Ok,
    /// The core says no: the driver raises it through the error bridge (`py/errors.rs`).
    Refused(Refusal),
    /// A command failed and the machine has finished its clean-up: the driver re-raises the
    /// error it caught for that command (this is its description).
    Failed(Failure),
}

impl End {
    /// Whether the machine ended as asked.
    pub fn is_ok(&self) -> bool {
        matches!(self, End::Ok)
    }
}

/// A sans-io protocol machine (docs/engine.md, "Driver loop").
pub trait Machine {
    /// The next command to perform, or `None` once the machine has ended. Until the command is
    /// answered by [`Machine::handle`], polling again returns the same command.
    fn poll(&mut self) -> Option<Command>;
    /// The result of the command [`Machine::poll`] returned last.
    fn handle(&mut self, event: Event);
    /// How the machine ended (`None` while it runs).
    fn end(&self) -> Option<&End>;
}

/// The commands a machine has decided on, and the one the driver is performing.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pending: VecDeque<Command>,
    current: Option<Command>,
}

impl Outbox {
    pub(crate) fn push(&mut self, command: Command) {
        self.pending.push_back(command);
    }

    /// Queues `command` before every other queued command.
    pub(crate) fn push_front(&mut self, command: Command) {
        self.pending.push_front(command);
    }

    /// The command being performed (taken from the queue if none is).
    pub(crate) fn next(&mut self) -> Option<Command> {
        if self.current.is_none() {
            self.current = self.pending.pop_front();
        }
        self.current.clone()
    }

    /// The command the event answers.
    pub(crate) fn answered(&mut self) -> Option<Command> {
        self.current.take()
    }

    pub(crate) fn clear(&mut self) {
        self.pending.clear();
        self.current = None;
    }
}

/// Runs a child machine inside a parent: the parent polls it first and learns how it ended.
pub(crate) fn poll_child<M: Machine>(child: &mut Option<M>) -> Result<Command, Option<(M, End)>> {
    let Some(machine) = child.as_mut() else {
        return Err(None);
    };
    if let Some(command) = machine.poll() {
        return Ok(command);
    }
    let machine = child.take().expect("checked above");
    let end = machine.end().cloned().unwrap_or(End::Ok);
    Err(Some((machine, end)))
}
