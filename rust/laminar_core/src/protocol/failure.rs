//! How a command failed ([`Failure`]): the core's one failure value, which the drivers build
//! from the error they caught (docs/engine.md §1) and every machine and retry rule reads.

use std::fmt;

/// How a command failed, classified as `laminar.errors` classifies the error the driver caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// Nothing was committed (`AbortableError`); `retriable`: the same call may succeed again.
    Abortable { retriable: bool },
    /// The outcome is unknown (`InDoubtError`, or a connection lost during a commit).
    InDoubt,
    /// Another instance took over (`FencedError`).
    Fenced,
    /// Anything else (`FatalError`, a server error).
    Fatal,
}

impl FailureKind {
    /// The kind's name as the bindings spell it.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Abortable { .. } => "abortable",
            FailureKind::InDoubt => "in_doubt",
            FailureKind::Fenced => "fenced",
            FailureKind::Fatal => "fatal",
        }
    }
}

/// A failed command: its kind and the error's message (for logs and details).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// How it failed.
    pub kind: FailureKind,
    /// The error's text.
    pub message: String,
}

impl Failure {
    /// A failure.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
