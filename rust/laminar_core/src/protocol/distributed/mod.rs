//! Scale-out (docs/protocol.md §4): Spark tasks write the partitions of a batch as two-phase
//! participants and the process that runs `foreachBatch` coordinates them, Vitess-style, with
//! `laminar.dt_state` as the decision record.
//!
//! - [`ScaleOutEpoch`]: the coordinator's epoch (create, tasks, vote and decision, completion);
//! - [`ScaleOutTask`]: one attempt of one partition (claim, clean the predecessor, write,
//!   prepare);
//! - [`vote`], [`decide`]: the coordinator's vote and its decision from the votes.
//!
//! The decision record's states and events are `protocol::dt_state`; the one roll-back-and-conclude
//! and complete-and-conclude that the coordinator, the watcher, start-up and `laminar resolve`
//! share is `protocol::resolution`.

mod coordinator;
mod task;
mod vote;

pub use coordinator::{ScaleContext, ScaleOutEpoch};
pub use task::{ScaleOutTask, TaskContext};
pub use vote::{Vote, decide, vote};
