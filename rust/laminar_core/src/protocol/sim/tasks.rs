//! The simulation's Spark: runs every partition's task attempt in a process of its own,
//! retries an attempt that died (up to four times), and sometimes runs a speculative twin.

use crate::protocol::command::{Event, ParticipantResult};

use crate::protocol::distributed::{ScaleOutTask, TaskContext};
use crate::protocol::failure::FailureKind;
use crate::protocol::sim::driver::{Proc, drive, failed};
use crate::protocol::sim::{Collected, World};
use crate::protocol::{End, Epoch};

/// `RunTasks`: Spark runs every partition's task (retrying an attempt that died, up to four
/// times), sometimes with a speculative twin; one result set per partition is collected.
pub(super) fn run_tasks(w: &mut World, dtid: &str, epoch: Epoch) -> Event {
    let first_run = w.tasks.ran.insert(epoch);
    let mut results = Vec::new();
    let mut token = 0;
    for part in 0..w.tasks.parts {
        let mut collected = None;
        for _ in 0..4 {
            token += 1;
            if first_run && w.tasks.fail_part == Some(part) {
                continue;
            }
            if let Some(r) = run_task(w, dtid, epoch, part, token) {
                collected = Some(r);
                break;
            }
        }
        let Some(mut chosen) = collected else {
            return failed(
                FailureKind::Abortable { retriable: true },
                format!("task {part} failed 4 times: job aborted"),
            );
        };
        if let (true, 0, Some(which)) = (first_run, part, w.tasks.twin) {
            token += 1;
            if let Some(twin) = run_task(w, dtid, epoch, part, token) {
                if which == Collected::Second {
                    chosen = twin;
                }
            }
        }
        results.extend(chosen);
    }
    Event::TaskResults { results }
}

/// One task attempt in a process of its own; None if it died or failed.
pub(super) fn run_task(
    w: &mut World,
    dtid: &str,
    epoch: Epoch,
    part: u32,
    token: u32,
) -> Option<Vec<ParticipantResult>> {
    let postgres: Vec<(String, String)> = w
        .pg_sinks
        .iter()
        .map(|s| (s.clone(), format!("laminar:{s}:{epoch}:{part}")))
        .collect();
    let mut proc = Proc {
        part: Some(part),
        ..Proc::default()
    };
    for (sink, gid) in &postgres {
        proc.gids.insert(format!("pg:{sink}:p{part}"), gid.clone());
    }
    let mut task = ScaleOutTask::new(TaskContext {
        dtid: dtid.to_owned(),
        epoch,
        part,
        attempt: format!("{part}-{token}"),
        postgres,
        kafka: w.kafka_sinks.clone(),
        create_record: w.tasks.create_record.then(|| "g".to_owned()),
        writer: w.tasks.writer.clone(),
    });
    match drive(w, &mut proc, &mut task) {
        Ok(End::Ok) => Some(task.results()),
        _ => None,
    }
}
