//! The driver loop's machine side (docs/engine.md §1): [`Machine`] (poll a command, handle its
//! event, end), how a machine ends ([`End`]), and the plumbing every machine shares — its queued
//! commands, the machine it runs inside itself, and the one loop (`Steps`) that makes a machine of
//! its steps.

use std::collections::VecDeque;

use crate::protocol::command::{Command, Event};
use crate::protocol::failure::{Failure, FailureKind};
use crate::protocol::refusal::Refusal;

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

    /// Drops the queued commands `keep` refuses (the one being performed stays).
    pub(crate) fn retain(&mut self, keep: impl FnMut(&Command) -> bool) {
        self.pending.retain(keep);
    }

    pub(crate) fn clear(&mut self) {
        self.pending.clear();
        self.current = None;
    }
}

/// The plumbing every machine shares: its queued commands, the machine it runs inside itself
/// (a recovery inside an epoch, a resolution inside a watcher pass), who the outstanding command
/// came from, and how it ended.
#[derive(Debug)]
pub(crate) struct Core<C> {
    pub(crate) out: Outbox,
    pub(crate) child: Option<C>,
    from_child: bool,
    end: Option<End>,
}

impl<C> Default for Core<C> {
    fn default() -> Self {
        Self {
            out: Outbox::default(),
            child: None,
            from_child: false,
            end: None,
        }
    }
}

impl<C> Core<C> {
    /// Ends the machine now, dropping what was queued.
    pub(crate) fn finish(&mut self, end: End) {
        self.out.clear();
        self.end = Some(end);
    }

    /// Runs `machine` inside this one; it is polled once nothing of this machine's is queued.
    pub(crate) fn run(&mut self, machine: C) {
        self.child = Some(machine);
    }

    /// Forgets how the last operation ended (a machine that runs several, one after the other).
    pub(crate) fn restart(&mut self) {
        self.out.clear();
        self.child = None;
        self.from_child = false;
        self.end = None;
    }
}

/// How a machine ends that has nothing left to do and no outcome: a bug in the machine, reported
/// as a failure rather than a panic.
pub(crate) fn stalled(what: &str) -> End {
    End::Failed(Failure::new(FailureKind::Fatal, format!("{what} stalled")))
}

/// What a machine does when nothing is queued and no child runs.
pub(crate) enum Idle {
    /// It queued more (or started a child): poll again.
    Continue,
    /// It has ended.
    End(End),
}

/// The steps of one machine: what each answer leads to. [`Machine`] is implemented for every
/// `Steps` by the one loop below.
pub(crate) trait Steps {
    type Child: Machine;
    fn core(&mut self) -> &mut Core<Self::Child>;
    fn core_ref(&self) -> &Core<Self::Child>;
    /// The answer to one of this machine's own commands.
    fn on(&mut self, command: Command, event: Event);
    /// The child ended.
    fn on_child_end(&mut self, child: Self::Child, end: End) {
        let _ = (child, end);
    }
    /// Nothing queued, no child: what next.
    fn idle(&mut self) -> Idle;
}

impl<S: Steps> Machine for S {
    fn poll(&mut self) -> Option<Command> {
        loop {
            let core = self.core();
            if core.end.is_some() {
                return None;
            }
            if let Some(command) = core.out.next() {
                core.from_child = false;
                return Some(command);
            }
            if let Some(child) = core.child.as_mut() {
                if let Some(command) = child.poll() {
                    core.from_child = true;
                    return Some(command);
                }
                let child = core.child.take().expect("checked above");
                let end = child.end().cloned().unwrap_or(End::Ok);
                self.on_child_end(child, end);
                continue;
            }
            if let Idle::End(end) = self.idle() {
                self.core().end = Some(end);
            }
        }
    }

    fn handle(&mut self, event: Event) {
        let core = self.core();
        if core.from_child {
            if let Some(child) = core.child.as_mut() {
                child.handle(event);
            }
            return;
        }
        if let Some(command) = core.out.answered() {
            self.on(command, event);
        }
    }

    fn end(&self) -> Option<&End> {
        self.core_ref().end.as_ref()
    }
}

/// The child of a machine that runs none.
#[derive(Debug)]
pub(crate) enum NoChild {}

impl Machine for NoChild {
    fn poll(&mut self) -> Option<Command> {
        match *self {}
    }

    fn handle(&mut self, _: Event) {
        match *self {}
    }

    fn end(&self) -> Option<&End> {
        match *self {}
    }
}

/// An enum of the machines one machine may run inside itself, itself a [`Machine`].
macro_rules! children {
    ($(#[$doc:meta])* $name:ident { $($variant:ident($machine:ty)),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub(crate) enum $name {
            $($variant(Box<$machine>),)*
        }

        impl $crate::protocol::Machine for $name {
            fn poll(&mut self) -> Option<$crate::protocol::Command> {
                match self { $(Self::$variant(m) => m.poll(),)* }
            }

            fn handle(&mut self, event: $crate::protocol::Event) {
                match self { $(Self::$variant(m) => m.handle(event),)* }
            }

            fn end(&self) -> Option<&$crate::protocol::End> {
                match self { $(Self::$variant(m) => m.end(),)* }
            }
        }
    };
}
pub(crate) use children;

/// The `Steps` plumbing of a machine whose `Core` is its field `core` and whose answers go to
/// its method `step` (and, given, the end of its child to the named method).
macro_rules! core_accessors {
    ($child:ty) => {
        type Child = $child;

        fn core(&mut self) -> &mut $crate::protocol::Core<$child> {
            &mut self.core
        }

        fn core_ref(&self) -> &$crate::protocol::Core<$child> {
            &self.core
        }

        fn on(&mut self, command: $crate::protocol::Command, event: $crate::protocol::Event) {
            self.step(command, event);
        }
    };
    ($child:ty, $ended:ident) => {
        $crate::protocol::core_accessors!($child);

        fn on_child_end(&mut self, child: $child, end: $crate::protocol::End) {
            self.$ended(child, end);
        }
    };
}
pub(crate) use core_accessors;
