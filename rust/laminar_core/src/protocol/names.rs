//! The names the scale-out protocol gives its records (docs/protocol.md §4), in one place: the
//! distributed transaction id, the participant names, the Kafka participant's transactional id,
//! the partition lock's key — and [`decision_of`], the one participant-matching rule.

use super::Epoch;
use super::command::ParticipantDecision;

/// The distributed transaction id of one epoch of a group.
pub fn dtid(group_id: &str, epoch: Epoch) -> String {
    format!("laminar:{group_id}:{epoch}")
}

/// The participant row naming the attempt that claimed partition `part`.
pub fn attempt_participant(part: u32) -> String {
    format!("p{part}")
}

/// The partition a `p<part>` participant names.
pub fn attempt_part(participant: &str) -> Option<u32> {
    participant.strip_prefix('p')?.parse().ok()
}

/// The participant name of PostgreSQL sink `sink_id` in partition `part`.
pub fn postgres_participant(sink_id: &str, part: u32) -> String {
    format!("pg:{sink_id}:p{part}")
}

/// The transactional id of Kafka sink `transactional_id` in partition `part`.
pub fn kafka_participant_id(transactional_id: &str, part: u32) -> String {
    format!("{transactional_id}.p{part}")
}

/// The participant name of a Kafka participant's transactional id.
pub fn kafka_participant(participant_id: &str) -> String {
    format!("kafka:{participant_id}")
}

/// `(base transactional id, part)` of a participant id `<tid>.p<part>`.
pub fn participant_base(participant_id: &str) -> Option<(&str, u32)> {
    let (base, part) = participant_id.rsplit_once(".p")?;
    if base.is_empty() || part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((base, part.parse().ok()?))
}

/// The key of the advisory lock that serialises the attempts of one partition.
pub fn partition_lock_key(dtid: &str, part: u32) -> String {
    format!("{dtid}#{part}")
}

/// Whether a prepared gid is the participant a `dt_participant` row names: the row's resource
/// is the exact gid its task prepared. (An earlier watcher matched by prefix, which also took
/// `…:1` for `…:10`–`…:19`; the gid is fully determined by sink, epoch and part, so equality
/// is the rule.)
pub fn participant_matches(resource: &str, gid: &str) -> bool {
    resource == gid
}

/// The decision a prepared gid belongs to: the newest matching row (rows come newest first).
pub fn decision_of<'a>(
    gid: &str,
    rows: &'a [ParticipantDecision],
) -> Option<&'a ParticipantDecision> {
    rows.iter().find(|r| participant_matches(&r.resource, gid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::records::DtState;

    #[test]
    fn names_and_exact_matching() {
        assert_eq!(dtid("g", 4), "laminar:g:4");
        assert_eq!(attempt_part(&attempt_participant(12)), Some(12));
        assert_eq!(attempt_part("pg:x:p1"), None);
        assert_eq!(
            participant_base(&kafka_participant_id("a.b", 3)),
            Some(("a.b", 3))
        );
        assert_eq!(participant_base("orders"), None);
        assert_eq!(participant_base("x.p"), None);
        let rows = vec![ParticipantDecision {
            dtid: "laminar:g:5".into(),
            group_id: "g".into(),
            state: DtState::Commit,
            participant: "pg:s:p1".into(),
            resource: "laminar:s:5:1".into(),
        }];
        assert!(decision_of("laminar:s:5:1", &rows).is_some());
        assert!(
            decision_of("laminar:s:5:10", &rows).is_none(),
            "no prefix match"
        );
        assert!(decision_of("laminar:s:5:", &rows).is_none());
    }
}
