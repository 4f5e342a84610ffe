//! Scale-out (docs/protocol.md §4): Spark tasks write the partitions of a batch as two-phase
//! participants and the process that runs `foreachBatch` coordinates them, Vitess-style, with
//! `laminar.dt_state` as the decision record.
//!
//! - [`ScaleOutEpoch`]: the coordinator's epoch (create, tasks, vote and decision, completion);
//! - [`ScaleOutTask`]: one attempt of one partition (claim, clean the predecessor, write,
//!   prepare);
//! - [`Resolution`]: the one roll-back-and-conclude and the one complete-and-conclude, used by
//!   the coordinator, the watcher, start-up and `laminar resolve`;
//! - [`vote`], [`decide`]: the coordinator's vote and its decision from the votes;
//! - [`dt_state`]: the decision record `laminar.dt_state`, its states and events.

mod coordinator;
pub mod dt_state;
mod resolution;
mod task;
mod vote;

pub use coordinator::{ScaleContext, ScaleOutEpoch};
pub use dt_state::{DtEvent, DtState};
pub use resolution::{Resolution, ResolutionOutcome};
pub use task::{ScaleOutTask, TaskContext};
pub use vote::{Vote, decide, vote};
