//! The names the protocols give their records, in one place: a group's default id
//! (docs/protocol.md §3), a Kafka sink's marker and identity groups (§1), the distributed
//! transaction id, the participant names, the Kafka participant's transactional id, the partition
//! lock's key (§4) — and [`decision_of`], the one participant-matching rule. The PostgreSQL gid
//! has its own module (`gid`).

use sha2::{Digest, Sha256};
use std::fmt::Write as _;

use crate::protocol::Epoch;
use crate::protocol::dt_state::DtState;

/// The first 16 hex digits of the SHA-256 of `text`: what a name too long to keep whole ends
/// with.
/// A PostgreSQL participant with the decision it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParticipantDecision {
    pub dtid: String,
    pub group_id: String,
    pub state: DtState,
    pub participant: String,
    /// The gid.
    pub resource: String,
}

pub fn digest16(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(16);
    for byte in &digest[..8] {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// A group's id when the user names none: its sinks' ids sorted and joined with `+` (past 200
/// characters: the first 180, `~` and `digest16` of the whole), then `+scale-out` when one sink
/// writes scale-out alone (a scale-out group of its own, apart from its single-process epochs).
pub fn default_group_id(sink_ids: &[String], scale_out: bool) -> String {
    let mut sorted: Vec<&str> = sink_ids.iter().map(String::as_str).collect();
    sorted.sort_unstable(); // UTF-8 byte order is code-point order
    let joined = sorted.join("+");
    let mut id = if joined.chars().count() <= 200 {
        joined
    } else {
        let head: String = joined.chars().take(180).collect();
        format!("{head}~{}", digest16(&joined))
    };
    if scale_out && sink_ids.len() == 1 {
        id.push_str("+scale-out");
    }
    id
}

/// The consumer group whose committed offset on (topic, 0) is a Kafka sink's epoch marker.
pub fn marker_group(transactional_id: &str) -> String {
    format!("laminar.{transactional_id}")
}

/// The consumer group whose committed offset on (topic, 0) is a Kafka sink's identity ("this
/// sink has started here and may have committed epochs").
pub fn identity_group(transactional_id: &str) -> String {
    format!("{}.identity", marker_group(transactional_id))
}

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
    use crate::protocol::dt_state::DtState;

    #[test]
    fn group_ids_sort_join_hash_and_mark_a_lone_scale_out_sink() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(default_group_id(&ids(&["b", "a"]), false), "a+b");
        assert_eq!(default_group_id(&ids(&["b", "a"]), true), "a+b");
        assert_eq!(default_group_id(&ids(&["s"]), true), "s+scale-out");
        assert_eq!(default_group_id(&ids(&["s"]), false), "s");
        let long = default_group_id(&ids(&[&"ü".repeat(150), &"x".repeat(60)]), false);
        assert_eq!(long.chars().count(), 180 + 1 + 16);
        assert!(
            long.starts_with(&format!("{}+ü", "x".repeat(60))),
            "sorted by code point"
        );
        assert_eq!(
            default_group_id(&ids(&[&"y".repeat(200)]), false),
            "y".repeat(200)
        );
        assert_eq!(marker_group("t"), "laminar.t");
        assert_eq!(identity_group("t"), "laminar.t.identity");
    }

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
