//! One sink alone (docs/protocol.md §1, §2): its epoch with the writer's retries
//! ([`SingleEpoch`]); a commit whose outcome is unknown is resolved by the sink's own
//! machines (`protocol::sink::{KafkaInDoubt, PostgresInDoubt}`) — never a blind abort: the
//! durable record decides.
//!
//! ```text
//! SingleEpoch:     sink_begin (false: skipped) -> sink_write -> sink_commit
//!                  abortable: sink_abort, sleep, again; in doubt: sink_recover (sleeping while
//!                  it cannot reach the server) -> committed, or again
//! ```

use crate::protocol::plan::{EpochPlan, SinkProgress, plan_epoch};

use crate::protocol::command::{Command, Event, LogLevel, unexpected};

use crate::protocol::failure::{Failure, FailureKind};
use crate::protocol::records::epoch_committed;
use crate::protocol::retry::{recover_delay_ms, retry_delay_ms};
use crate::protocol::{
    Core, End, Epoch, Idle, NoChild, Refusal, RefusalKind, Steps, core_accessors,
};

/// One epoch of a lone sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleConfig {
    pub sink_id: String,
    pub epoch: Epoch,
    /// The sink's last committed epoch (its tracker).
    pub last: Option<Epoch>,
    /// The writer knows its query (an epoch older than a committed one is refused).
    pub refuse_backwards: bool,
    pub retries: u32,
    pub retry_backoff_ms: u64,
}

/// One epoch of a lone sink (module docs).
#[derive(Debug)]
pub struct SingleEpoch {
    c: SingleConfig,
    core: Core<NoChild>,
    attempt: u32,
    recover_tries: u32,
    in_doubt: Option<Failure>,
    aborted: Option<Failure>,
    committed: bool,
    ending: Option<End>,
}

impl SingleEpoch {
    /// The epoch, checked against the sink's last committed epoch first.
    pub fn new(c: SingleConfig) -> Self {
        let mut me = Self {
            c,
            core: Core::default(),
            attempt: 0,
            recover_tries: 0,
            in_doubt: None,
            aborted: None,
            committed: false,
            ending: None,
        };
        let backwards = me.c.refuse_backwards && me.c.last.is_some_and(|l| me.c.epoch < l);
        if backwards {
            let progress = [SinkProgress {
                sink_id: me.c.sink_id.clone(),
                last: me.c.last,
            }];
            if let EpochPlan::Refuse(r) = plan_epoch(me.c.epoch, &progress, &[], true) {
                me.ending = Some(End::Refused(
                    r.for_sink(&me.c.sink_id).for_epoch(me.c.epoch),
                ));
                return me;
            }
        }
        me.begin();
        me
    }

    /// Whether this call committed the epoch (false: it was committed before, and skipped).
    pub fn committed(&self) -> bool {
        self.committed
    }

    /// How many attempts were made.
    pub fn attempts(&self) -> u32 {
        self.attempt.max(1)
    }

    fn begin(&mut self) {
        self.attempt += 1;
        self.core.out.push(Command::SinkBegin {
            sink_id: self.c.sink_id.clone(),
            epoch: self.c.epoch,
        });
    }

    fn recover(&mut self) {
        self.core.out.push(Command::SinkRecover {
            sink_id: self.c.sink_id.clone(),
        });
    }

    fn after_abortable(&mut self, f: Failure) {
        let Some(delay) = retry_delay_ms(
            self.attempt,
            self.c.retries,
            self.c.retry_backoff_ms,
            f.kind,
            false,
        ) else {
            self.ending = Some(End::Failed(f));
            return;
        };
        self.core.out.push(Command::warn(format!(
            "sink {}: epoch {} aborted ({f}); retry {}/{} in {:.1}s",
            self.c.sink_id,
            self.c.epoch,
            self.attempt,
            self.c.retries,
            delay as f64 / 1000.0
        )));
        self.core.out.push(Command::Sleep { ms: delay });
        self.begin();
    }

    fn step(&mut self, command: Command, event: Event) {
        let (sink_id, epoch) = (self.c.sink_id.clone(), self.c.epoch);
        match (command, event) {
            (Command::SinkBegin { .. }, Event::Began { opened: false }) => {
                self.core.out.push(Command::log(
                    LogLevel::Info,
                    format!("sink {sink_id}: epoch {epoch} already committed, skipped"),
                ));
                self.ending = Some(End::Ok);
            }
            (Command::SinkBegin { .. }, Event::Began { opened: true }) => {
                self.core.out.push(Command::SinkWrite {
                    sink_id: sink_id.clone(),
                    epoch,
                    keep: false,
                });
                self.core.out.push(Command::SinkCommit { sink_id, epoch });
            }
            (Command::SinkCommit { .. }, Event::Ack) => {
                self.committed = true;
                self.ending = Some(End::Ok);
            }
            (_, Event::Failed(f)) if f.kind == FailureKind::InDoubt && self.in_doubt.is_none() => {
                self.core.out.clear();
                self.recover_tries = 0;
                self.in_doubt = Some(f);
                self.recover();
            }
            (Command::SinkRecover { .. }, Event::Marker { epoch: last, .. }) => {
                let err = self
                    .in_doubt
                    .take()
                    .unwrap_or_else(|| Failure::new(FailureKind::InDoubt, ""));
                if epoch_committed(last, epoch) {
                    self.core.out.push(Command::warn(format!(
                        "sink {sink_id}: in-doubt commit of epoch {epoch} resolved as committed"
                    )));
                    self.committed = true;
                    self.ending = Some(End::Ok);
                } else if self.attempt > self.c.retries {
                    self.ending = Some(End::Failed(err));
                } else {
                    self.core.out.push(Command::warn(format!(
                        "sink {sink_id}: in-doubt commit of epoch {epoch} resolved as not committed \
                         ({err}); retrying"
                    )));
                    self.begin();
                }
            }
            (Command::SinkRecover { .. }, Event::Failed(f))
                if matches!(f.kind, FailureKind::Abortable { .. }) =>
            {
                self.recover_tries += 1;
                let Some(delay) =
                    recover_delay_ms(self.recover_tries, self.c.retries, self.c.retry_backoff_ms)
                else {
                    let refusal = Refusal::new(
                        RefusalKind::StillInDoubt,
                        format!(
                            "the outcome of epoch {epoch}'s commit is still unknown after {} \
                             recovery attempts ({f}); restart the writer: start-up resolves it",
                            self.recover_tries
                        ),
                    );
                    self.ending = Some(End::Refused(refusal.for_sink(sink_id).for_epoch(epoch)));
                    return;
                };
                self.core.out.push(Command::warn(format!(
                    "sink {sink_id}: recovery of in-doubt epoch {epoch} failed ({f}); retry in \
                     {:.1}s",
                    delay as f64 / 1000.0
                )));
                self.core.out.push(Command::Sleep { ms: delay });
                self.recover();
            }
            (Command::SinkWrite { .. } | Command::SinkCommit { .. }, Event::Failed(f))
                if matches!(f.kind, FailureKind::Abortable { .. }) =>
            {
                self.core.out.clear();
                self.aborted = Some(f);
                self.core.out.push(Command::SinkAbort { sink_id, epoch });
            }
            (Command::SinkAbort { .. }, event) => {
                if let Event::Failed(e) = event {
                    self.core.out.push(Command::warn(format!(
                        "sink {sink_id}: abort of epoch {epoch} failed ({e}); fencing will clean up"
                    )));
                }
                if let Some(f) = self.aborted.take() {
                    self.after_abortable(f);
                }
            }
            (Command::SinkBegin { .. }, Event::Failed(f))
                if matches!(f.kind, FailureKind::Abortable { .. }) =>
            {
                self.after_abortable(f);
            }
            (_, Event::Failed(f)) => {
                self.core.out.clear();
                self.ending = Some(End::Failed(f));
            }
            (
                Command::SinkWrite { .. } | Command::Log { .. } | Command::Sleep { .. },
                Event::Ack,
            ) => {}
            (command, event) => {
                self.core.out.clear();
                self.ending = Some(End::Failed(unexpected(&command, &event)));
            }
        }
    }
}

impl Steps for SingleEpoch {
    core_accessors!(NoChild);

    fn idle(&mut self) -> Idle {
        Idle::End(self.ending.take().unwrap_or_else(|| {
            End::Failed(Failure::new(
                FailureKind::Fatal,
                "single-sink epoch stalled",
            ))
        }))
    }
}
