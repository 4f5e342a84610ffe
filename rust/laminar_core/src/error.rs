//! The core's one error type. Every fallible core function returns [`CoreError`]; the binding shell
//! converts it to the matching `laminar.errors` class in exactly one place (`py/errors.rs`).

/// What went wrong, classified the way `laminar.errors` classifies it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// A lifecycle call that is not legal in the current state (a bug in the caller).
    /// The state is left unchanged.
    #[error("{0}")]
    IllegalState(String),
    /// Persisted state that does not decode: corrupt, truncated, garbage, or written by a newer
    /// version.
    #[error("{0}")]
    InvalidStateEncoding(String),
    /// A schema/type/setting problem detected before anything is written (e.g. an Arrow type that
    /// cannot go into a column). The message names the column and both types.
    #[error("{0}")]
    Config(String),
    /// A value that cannot be written as asked (e.g. out of range for its target column).
    #[error("{0}")]
    Data(String),
}

/// Result alias used across the core.
pub type CoreResult<T> = Result<T, CoreError>;
