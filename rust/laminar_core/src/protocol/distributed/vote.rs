//! The scale-out coordinator's vote (docs/protocol.md §4, step 3, "Retries and speculation") and
//! its decision from the votes ([`decide`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::protocol::command::{ParticipantKind, ParticipantResult, ParticipantRow, ResultStatus};
use crate::protocol::dt_state::DtEvent;
use crate::protocol::names::attempt_part;

/// A participant's answer to the prepare phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vote {
    /// Prepared: durable and waiting for the decision.
    Prepared,
    /// Failed (or never answered): the transaction must roll back.
    Failed,
}

/// The coordinator's decision from the votes: commit only if `expected` participants all
/// prepared (a missing answer is a "no").
pub fn decide(votes: &[Vote], expected: usize) -> DtEvent {
    if votes.len() == expected && votes.iter().all(|v| *v == Vote::Prepared) {
        DtEvent::StartCommit
    } else {
        DtEvent::SetRollback
    }
}

/// The coordinator's vote (docs/protocol.md §4, step 3): per collected partition, exactly one
/// attempt was collected, it is the attempt that claimed the partition last, and every
/// participant of it prepared (or was empty); a partition claimed but not collected is a "no".
/// Returns the votes and how many are expected.
pub fn vote(results: &[ParticipantResult], claims: &[ParticipantRow]) -> (Vec<Vote>, usize) {
    let mut attempts: BTreeMap<u32, BTreeSet<&str>> = BTreeMap::new();
    for r in results {
        attempts.entry(r.part).or_default().insert(&r.attempt);
    }
    let claimed: BTreeMap<u32, &str> = claims
        .iter()
        .filter(|c| c.kind == ParticipantKind::Attempt)
        .filter_map(|c| Some((attempt_part(&c.participant)?, c.resource.as_str())))
        .collect();
    let mut votes: Vec<Vote> = attempts
        .iter()
        .map(|(part, seen)| {
            let ok = seen.len() == 1
                && claimed.get(part).is_some_and(|a| seen.contains(a))
                && results
                    .iter()
                    .filter(|r| r.part == *part)
                    .all(|r| matches!(r.status, ResultStatus::Prepared | ResultStatus::Empty));
            if ok { Vote::Prepared } else { Vote::Failed }
        })
        .collect();
    votes.extend(
        claimed
            .keys()
            .filter(|p| !attempts.contains_key(p))
            .map(|_| Vote::Failed),
    );
    (votes, attempts.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(part: u32, attempt: &str, status: ResultStatus) -> ParticipantResult {
        ParticipantResult {
            part,
            attempt: attempt.into(),
            participant: format!("pg:s:p{part}"),
            kind: ParticipantKind::Postgres,
            resource: format!("laminar:s:0:{part}"),
            records: 1,
            prepared_state: String::new(),
            marker: None,
            status,
        }
    }

    fn claim(part: u32, attempt: &str) -> ParticipantRow {
        ParticipantRow {
            participant: format!("p{part}"),
            kind: ParticipantKind::Attempt,
            resource: attempt.into(),
        }
    }

    fn decision(results: &[ParticipantResult], claims: &[ParticipantRow]) -> DtEvent {
        let (votes, expected) = vote(results, claims);
        decide(&votes, expected)
    }

    #[test]
    fn commit_only_when_every_partition_was_collected_from_its_last_claimant() {
        use ResultStatus::*;
        let ok = [result(0, "a", Prepared), result(1, "b", Empty)];
        let claims = [claim(0, "a"), claim(1, "b")];
        assert_eq!(decision(&ok, &claims), DtEvent::StartCommit);
        // a twin claimed partition 0 after the collected attempt
        assert_eq!(
            decision(&ok, &[claim(0, "twin"), claim(1, "b")]),
            DtEvent::SetRollback
        );
        // a partition claimed but not collected
        assert_eq!(
            decision(&ok, &[claims[0].clone(), claims[1].clone(), claim(2, "c")]),
            DtEvent::SetRollback
        );
        // two attempts of one partition collected
        let two = [result(0, "a", Prepared), result(0, "a2", Prepared)];
        assert_eq!(decision(&two, &[claim(0, "a")]), DtEvent::SetRollback);
        // a participant that did not prepare
        assert_eq!(
            decision(&[result(0, "a", Skipped)], &[claim(0, "a")]),
            DtEvent::SetRollback
        );
        // nothing claimed for a collected partition
        assert_eq!(
            decision(&[result(0, "a", Prepared)], &[]),
            DtEvent::SetRollback
        );
    }

    #[test]
    fn commit_needs_every_expected_participant_prepared() {
        use Vote::*;
        assert_eq!(decide(&[Prepared, Prepared], 2), DtEvent::StartCommit);
        assert_eq!(decide(&[], 0), DtEvent::StartCommit);
        assert_eq!(decide(&[Prepared, Failed], 2), DtEvent::SetRollback);
        assert_eq!(decide(&[Prepared], 2), DtEvent::SetRollback);
    }
}
