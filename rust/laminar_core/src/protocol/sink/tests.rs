//! Every answer of [`SinkTxn`], state by state.

use super::*;
use crate::protocol::state::StateKind;

/// A machine in the given kind of state for epoch 5, having committed epoch 3 before.
fn in_state(kind: StateKind) -> SinkTxn {
    in_state_of(kind, true)
}

/// The same for a sink whose prepare is not durable (Kafka).
fn kafka_in_state(kind: StateKind) -> SinkTxn {
    in_state_of(kind, false)
}

fn in_state_of(kind: StateKind, durable: bool) -> SinkTxn {
    let mut m = SinkTxn::new(EpochTracker::default(), None).durable_prepare(durable);
    m.learned_last(Some(3)).unwrap();
    if kind == StateKind::Idle {
        return m;
    }
    assert_eq!(m.begin(5), Ok(BeginAnswer::Open));
    m.opened(5, 10).unwrap();
    match kind {
        StateKind::Active => {}
        StateKind::Prepared => m.prepared(5).unwrap(),
        StateKind::Committing => m.commit_started(5, 20).unwrap(),
        StateKind::Aborting => {
            assert_eq!(m.abort(5), Ok(AbortAnswer::Rollback));
        }
        StateKind::Failed => {
            m.commit_started(5, 20).unwrap();
            assert_eq!(m.commit_failed(true, 30), Ok(CommitFailure::InDoubt));
        }
        StateKind::Idle => unreachable!(),
    }
    assert_eq!(m.tracker().state().kind(), kind);
    m
}

fn refused<T: std::fmt::Debug>(r: CoreResult<T>, needle: &str) {
    match r {
        Err(CoreError::IllegalState(msg)) => {
            assert!(msg.contains(needle), "{msg:?} lacks {needle:?}")
        }
        other => panic!("expected a refusal containing {needle:?}, got {other:?}"),
    }
}

/// A refusal changes nothing the sink can see.
fn unchanged(before: &SinkTxn, after: &SinkTxn) {
    assert_eq!(before.tracker().state(), after.tracker().state());
    assert_eq!(before.tracker().metrics(), after.tracker().metrics());
    assert_eq!(before.pending(), after.pending());
}

#[test]
fn begin_in_each_state() {
    for kind in StateKind::ALL {
        let mut m = in_state(kind);
        let before = m.clone();
        let answer = m.begin(6);
        match kind {
            StateKind::Idle => assert_eq!(answer, Ok(BeginAnswer::Open)),
            StateKind::Failed => assert_eq!(answer, Ok(BeginAnswer::Recover)),
            _ => refused(answer, kind.name()),
        }
        unchanged(&before, &m);
    }
}

#[test]
fn begin_skips_a_replay_and_says_when_it_is_older() {
    let mut m = in_state(StateKind::Idle);
    assert_eq!(
        m.begin(3),
        Ok(BeginAnswer::Skip {
            last: 3,
            older: false
        })
    );
    assert_eq!(
        m.begin(1),
        Ok(BeginAnswer::Skip {
            last: 3,
            older: true
        })
    );
    assert_eq!(m.begin(4), Ok(BeginAnswer::Open));
    assert_eq!(m.tracker().metrics().replays_skipped, 2);
    assert!(m.tracker().state().is_idle());
}

#[test]
fn a_store_that_holds_the_epoch_makes_it_a_skip() {
    let mut m = in_state(StateKind::Idle);
    assert_eq!(m.begin(6), Ok(BeginAnswer::Open));
    assert_eq!(
        m.store_holds(6, Some(7)),
        Ok(BeginAnswer::Skip {
            last: 7,
            older: true
        })
    );
    assert_eq!(m.tracker().last_committed_epoch(), Some(7));
    assert_eq!(
        m.store_holds(7, Some(7)),
        Ok(BeginAnswer::Skip {
            last: 7,
            older: false
        })
    );
    refused(
        m.store_holds(9, Some(8)),
        "refused the claim of epoch 9 but holds epoch 8",
    );
    refused(m.store_holds(9, None), "holds no epoch");
}

#[test]
fn write_and_prepare_in_each_state() {
    for kind in StateKind::ALL {
        let m = in_state(kind);
        let before = m.clone();
        match kind {
            StateKind::Active => {
                assert_eq!(m.write(), Ok(5));
                assert_eq!(m.prepare(), Ok(5));
            }
            _ => {
                refused(
                    m.write(),
                    &format!("needs an open transaction, but the sink is {}", kind.name()),
                );
                refused(m.prepare(), "prepare");
            }
        }
        unchanged(&before, &m);
    }
    let mut m = in_state(StateKind::Active);
    m.wrote(4, 40).unwrap();
    m.prepared(5).unwrap();
    assert_eq!(m.prepared_epoch(), Some(5));
    assert_eq!(m.tracker().metrics().events_written, 4);
}

#[test]
fn commit_in_each_state() {
    for kind in StateKind::ALL {
        let m = in_state(kind);
        let answer = m.commit(5);
        match kind {
            StateKind::Active => assert_eq!(answer, Ok(CommitAnswer::OnePhase)),
            StateKind::Prepared => assert_eq!(answer, Ok(CommitAnswer::Prepared)),
            _ => refused(answer, "commit_started"),
        }
        // Another epoch than the open one is refused whatever the state.
        refused(m.commit(6), "commit_started");
    }
}

#[test]
fn a_participant_commits_only_through_prepare() {
    let mut m = SinkTxn::new(EpochTracker::default(), Some(2));
    m.opened(0, 0).unwrap();
    refused(
        m.commit(0),
        "scale-out participant 2: it commits only through prepare",
    );
    m.prepared(0).unwrap();
    assert_eq!(m.commit(0), Ok(CommitAnswer::Prepared));
}

#[test]
fn commit_outcomes() {
    // Confirmed: committed, the epoch is the last committed one.
    let mut m = in_state(StateKind::Prepared);
    m.commit_started(5, 20).unwrap();
    m.commit_ok(25).unwrap();
    assert_eq!(m.tracker().last_committed_epoch(), Some(5));
    assert_eq!(m.close(), CloseAnswer::Nothing);

    // One phase, connection lost: in doubt, the commit pending.
    let mut m = in_state(StateKind::Active);
    m.commit_started(5, 20).unwrap();
    assert_eq!(m.commit_failed(true, 30), Ok(CommitFailure::InDoubt));
    assert_eq!(
        (m.in_doubt(), m.pending()),
        (Some(5), Some(Decision::Commit))
    );

    // One phase, the server answered: rolled back, the epoch can be written again.
    let mut m = in_state(StateKind::Active);
    m.commit_started(5, 20).unwrap();
    assert_eq!(m.commit_failed(false, 30), Ok(CommitFailure::RolledBack));
    assert!(m.tracker().state().is_idle());
    assert_eq!(m.tracker().last_committed_epoch(), Some(3));
    assert_eq!(m.begin(5), Ok(BeginAnswer::Open));

    // COMMIT PREPARED failed, lost or not: in doubt (the gid may still be there).
    for lost in [true, false] {
        let mut m = in_state(StateKind::Prepared);
        m.commit_started(5, 20).unwrap();
        assert_eq!(m.commit_failed(lost, 30), Ok(CommitFailure::InDoubt));
        assert_eq!(m.pending(), Some(Decision::Commit));
    }

    // COMMIT PREPARED found no gid: the store says how it ended.
    for committed in [true, false] {
        let mut m = in_state(StateKind::Prepared);
        m.commit_started(5, 20).unwrap();
        m.commit_overtaken(committed, 30).unwrap();
        assert!(m.tracker().state().is_idle());
        let last = if committed { Some(5) } else { Some(3) };
        assert_eq!(m.tracker().last_committed_epoch(), last);
    }
}

#[test]
fn abort_in_each_state() {
    for kind in StateKind::ALL {
        let mut m = in_state(kind);
        let before = m.clone();
        let answer = m.abort(5);
        match kind {
            StateKind::Active => assert_eq!(answer, Ok(AbortAnswer::Rollback)),
            StateKind::Prepared => assert_eq!(answer, Ok(AbortAnswer::RollbackPrepared)),
            _ => {
                refused(answer, "abort_started");
                unchanged(&before, &m);
            }
        }
    }
    // Another epoch than the open one is refused.
    let mut m = in_state(StateKind::Prepared);
    refused(m.abort(6), "abort_started epoch 6");
}

#[test]
fn abort_outcomes() {
    // Confirmed; aborting the same epoch again is nothing.
    let mut m = in_state(StateKind::Active);
    assert_eq!(m.abort(5), Ok(AbortAnswer::Rollback));
    m.abort_ok(20).unwrap();
    assert_eq!(m.abort(5), Ok(AbortAnswer::Nothing));
    refused(m.abort(4), "abort_started");

    // Failed: in doubt, the abort pending; recovery finishes it with ROLLBACK PREPARED.
    let mut m = in_state(StateKind::Prepared);
    m.abort(5).unwrap();
    m.abort_failed().unwrap();
    assert_eq!(m.pending(), Some(Decision::Abort));
    assert_eq!(
        m.recover(),
        RecoverAnswer::Resolve {
            epoch: 5,
            decision: Decision::Abort
        }
    );

    // Overtaken by another process's COMMIT PREPARED: committed.
    let mut m = in_state(StateKind::Prepared);
    m.abort(5).unwrap();
    m.abort_overtaken(20).unwrap();
    assert_eq!(m.tracker().last_committed_epoch(), Some(5));
    assert_eq!(m.tracker().metrics().abort_failures, 1);
}

#[test]
fn abort_after_error_rolls_back_only_an_open_epoch() {
    for kind in StateKind::ALL {
        let mut m = in_state(kind);
        let answer = m.abort_after_error();
        if kind == StateKind::Active {
            assert_eq!(answer, Ok(Some(5)));
            m.abort_ok(20).unwrap();
            assert!(m.tracker().state().is_idle());
        } else {
            assert_eq!(answer, Ok(None));
            assert_eq!(m.tracker().state().kind(), kind);
        }
    }
}

#[test]
fn recover_init_and_close_in_each_state() {
    for kind in StateKind::ALL {
        let m = in_state(kind);
        let expected_recover = match kind {
            StateKind::Failed => RecoverAnswer::Resolve {
                epoch: 5,
                decision: Decision::Commit,
            },
            _ => RecoverAnswer::ReadLast,
        };
        assert_eq!(m.recover(), expected_recover);
        let between = matches!(kind, StateKind::Idle | StateKind::Failed);
        assert_eq!(m.between_epochs(), between);
        if between {
            assert_eq!(m.init(), Ok(()));
        } else {
            refused(m.init(), &format!("while the sink is {}", kind.name()));
        }
        let expected_close = match kind {
            StateKind::Active => CloseAnswer::AbortOpen(5),
            StateKind::Prepared => CloseAnswer::LeavePrepared(5),
            _ => CloseAnswer::Nothing,
        };
        assert_eq!(m.close(), expected_close);
        assert_eq!(m.writing().is_some(), kind == StateKind::Active);
        assert_eq!(m.prepared_epoch().is_some(), kind == StateKind::Prepared);
        assert_eq!(m.in_doubt().is_some(), kind == StateKind::Failed);
    }
}

#[test]
fn resolution_and_what_the_store_says() {
    for committed in [true, false] {
        let mut m = in_state(StateKind::Failed);
        // While in doubt, the store's word waits for the resolution.
        m.learned_last(Some(9)).unwrap();
        assert_eq!(m.tracker().last_committed_epoch(), Some(3));
        let last = if committed { Some(5) } else { Some(3) };
        m.resolved(committed, last, 40).unwrap();
        assert!(m.tracker().state().is_idle());
        assert_eq!(m.pending(), None);
        assert_eq!(m.tracker().last_committed_epoch(), last);
        assert_eq!(m.begin(5).is_ok_and(|a| a == BeginAnswer::Open), !committed);
    }
    let mut m = in_state(StateKind::Idle);
    m.learned_last(Some(9)).unwrap();
    assert_eq!(m.tracker().last_committed_epoch(), Some(9));
    m.learned_last(None).unwrap();
    assert_eq!(m.tracker().last_committed_epoch(), None);
}

// -- a prepare that is not durable (Kafka) -------------------------------------------------------

#[test]
fn kafka_a_refused_commit_is_rolled_back_even_after_prepare() {
    for from in [StateKind::Active, StateKind::Prepared] {
        // The broker answered (an abortable error): nothing committed, the epoch can be retried.
        let mut m = kafka_in_state(from);
        m.commit_started(5, 20).unwrap();
        assert_eq!(m.commit_failed(false, 30), Ok(CommitFailure::RolledBack));
        assert!(m.tracker().state().is_idle());
        assert_eq!(m.tracker().last_committed_epoch(), Some(3));
        assert_eq!(m.tracker().metrics().commit_failures, 1);
        assert_eq!(m.begin(5), Ok(BeginAnswer::Open));
        // The outcome is unknown (timeout, fenced, fatal): in doubt.
        let mut m = kafka_in_state(from);
        m.commit_started(5, 20).unwrap();
        assert_eq!(m.commit_failed(true, 30), Ok(CommitFailure::InDoubt));
        assert_eq!(m.in_doubt(), Some(5));
    }
}

#[test]
fn kafka_abort_in_each_state() {
    for kind in StateKind::ALL {
        let mut m = kafka_in_state(kind);
        let before = m.clone();
        let answer = m.abort(5);
        match kind {
            // Idle: a no-op, even for an epoch this sink never saw.
            StateKind::Idle => {
                assert_eq!(answer, Ok(AbortAnswer::Nothing));
                assert_eq!(m.abort(42), Ok(AbortAnswer::Nothing));
                unchanged(&before, &m);
            }
            StateKind::Active => assert_eq!(answer, Ok(AbortAnswer::Rollback)),
            StateKind::Prepared => assert_eq!(answer, Ok(AbortAnswer::RollbackPrepared)),
            _ => {
                refused(answer, "abort_started");
                unchanged(&before, &m);
            }
        }
    }
}

#[test]
fn kafka_abort_via_each_client_in_each_state() {
    for kind in StateKind::ALL {
        for client in [Client::Live, Client::GivenUp, Client::Fenced] {
            let mut m = kafka_in_state(kind);
            let before = m.clone();
            let answer = m.abort_via(5, client, 40);
            match (kind, client) {
                (StateKind::Idle, _) => {
                    assert_eq!(answer, Ok(AbortAnswer::Nothing));
                    unchanged(&before, &m);
                }
                (_, Client::Fenced) => {
                    assert_eq!(answer, Ok(AbortAnswer::Fenced));
                    unchanged(&before, &m);
                }
                (StateKind::Active | StateKind::Prepared, Client::GivenUp) => {
                    // Aborted here, nothing sent: the next producer's init fences the old one.
                    assert_eq!(answer, Ok(AbortAnswer::Nothing));
                    assert!(m.tracker().state().is_idle());
                    assert_eq!(m.tracker().metrics().aborts, 1);
                    assert_eq!(m.begin(5), Ok(BeginAnswer::Open));
                }
                (_, Client::GivenUp) => {
                    assert_eq!(answer, Ok(AbortAnswer::Reopen));
                    unchanged(&before, &m);
                }
                (StateKind::Active, Client::Live) => assert_eq!(answer, Ok(AbortAnswer::Rollback)),
                (StateKind::Prepared, Client::Live) => {
                    assert_eq!(answer, Ok(AbortAnswer::RollbackPrepared))
                }
                (_, Client::Live) => {
                    refused(answer, "abort_started");
                    unchanged(&before, &m);
                }
            }
        }
    }
    // A durable prepare keeps abort()'s answers while idle.
    let mut m = in_state(StateKind::Idle);
    refused(m.abort_via(5, Client::Live, 40), "abort_started");
    // Another epoch than the open one is refused.
    let mut m = kafka_in_state(StateKind::Active);
    refused(m.abort_via(6, Client::GivenUp, 40), "abort_started epoch 6");
}

#[test]
fn kafka_a_failed_abort_reopens_and_is_aborted() {
    for from in [StateKind::Active, StateKind::Prepared] {
        let mut m = kafka_in_state(from);
        m.abort(5).unwrap();
        assert_eq!(m.abort_failed(), Ok(AbortFailure::Reopen));
        // Fenced: the sink raises instead; the epoch stays in doubt.
        assert_eq!(m.in_doubt(), Some(5));
        m.abort_reopened(50).unwrap();
        assert!(m.tracker().state().is_idle());
        assert_eq!(m.pending(), None);
        assert_eq!(m.tracker().last_committed_epoch(), Some(3));
        assert_eq!(m.tracker().metrics().abort_failures, 1);
        assert_eq!(m.begin(5), Ok(BeginAnswer::Open));
    }
    // A durable prepare: in doubt.
    let mut m = in_state(StateKind::Prepared);
    m.abort(5).unwrap();
    assert_eq!(m.abort_failed(), Ok(AbortFailure::InDoubt));
    // abort_reopened outside doubt is refused.
    let mut m = kafka_in_state(StateKind::Idle);
    refused(m.abort_reopened(50), "resolve");
}

#[test]
fn kafka_close_aborts_a_prepared_epoch() {
    for kind in StateKind::ALL {
        let expected = match kind {
            StateKind::Active | StateKind::Prepared => CloseAnswer::AbortOpen(5),
            _ => CloseAnswer::Nothing,
        };
        assert_eq!(kafka_in_state(kind).close(), expected);
    }
}

#[test]
fn saw_committed_raises_never_lowers_and_waits_while_busy() {
    for kind in StateKind::ALL {
        let mut m = kafka_in_state(kind);
        m.saw_committed(Some(9)).unwrap();
        let expected = if kind == StateKind::Idle { 9 } else { 3 };
        assert_eq!(m.tracker().last_committed_epoch(), Some(expected));
        m.saw_committed(Some(2)).unwrap();
        m.saw_committed(None).unwrap();
        assert_eq!(m.tracker().last_committed_epoch(), Some(expected));
    }
    let mut m = SinkTxn::new(EpochTracker::default(), None).durable_prepare(false);
    m.saw_committed(None).unwrap();
    assert_eq!(m.tracker().last_committed_epoch(), None);
    m.saw_committed(Some(0)).unwrap();
    assert_eq!(m.tracker().last_committed_epoch(), Some(0));
}

#[test]
fn reopened_settles_each_state_by_what_the_init_read() {
    for kind in StateKind::ALL {
        for last in [Some(3), Some(5), Some(7), None] {
            let mut m = kafka_in_state(kind);
            m.reopened(last, 60).unwrap();
            assert!(m.tracker().state().is_idle(), "{kind:?} {last:?}");
            assert_eq!(m.pending(), None);
            let record = m.tracker().record(5).map(|r| r.state);
            let metrics = m.tracker().metrics();
            match kind {
                StateKind::Idle => assert_eq!(record, None),
                StateKind::Active | StateKind::Prepared | StateKind::Aborting => {
                    assert_eq!(record, Some(RecordState::Aborted));
                    assert_eq!(metrics.aborts, 1);
                }
                StateKind::Committing | StateKind::Failed => {
                    // Committed exactly when the epoch read back covers it.
                    let committed = last.is_some_and(|l| l >= 5);
                    let want = if committed {
                        RecordState::Committed
                    } else {
                        RecordState::Aborted
                    };
                    assert_eq!(record, Some(want), "{kind:?} {last:?}");
                    assert_eq!(metrics.commit_failures, 1);
                }
            }
            // The epoch read back is kept, never lowered.
            let known = m.tracker().last_committed_epoch();
            assert!(
                known >= last && known >= Some(3),
                "{kind:?} {last:?} {known:?}"
            );
        }
    }
}

#[test]
fn resolved_by_marker_resolves_only_an_epoch_in_doubt() {
    for kind in StateKind::ALL {
        for committed in [Some(true), Some(false), None] {
            let mut m = kafka_in_state(kind);
            let before = m.tracker().state();
            m.resolved_by_marker(committed, Some(4), 70).unwrap();
            match (kind, committed) {
                (StateKind::Failed, Some(c)) => {
                    assert!(m.tracker().state().is_idle());
                    let want = if c { Some(5) } else { Some(4) };
                    assert_eq!(m.tracker().last_committed_epoch(), want);
                }
                (StateKind::Idle, _) => {
                    assert_eq!(m.tracker().last_committed_epoch(), Some(4));
                }
                _ => {
                    assert_eq!(m.tracker().state(), before);
                    assert_eq!(m.tracker().last_committed_epoch(), Some(3));
                }
            }
        }
    }
}
