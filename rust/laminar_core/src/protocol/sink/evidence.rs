//! Which evidence proves a Kafka sink's last committed epoch: docs/protocol.md §1, "The
//! decision" (the table of marker, identity, producer epoch and partitions). The sink reads
//! (`laminar.kafka._witness.Witness`), this rule decides, in two questions: after the marker read,
//! and — only when there is no marker — after the identity read.

use crate::protocol::state::Epoch;

/// What says a sink without a marker has written before (docs/protocol.md §1, sources 2 and 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    /// The identity group holds its committed offset: the sink started here.
    Identity,
    /// An atomic group's or scale-out participant's recovery found a decision row for it in
    /// `laminar.txn_state` (`KafkaSink.recorded_history`).
    DecisionRow,
    /// The transaction coordinator knew the transactional id (producer epoch > 0).
    ProducerEpoch(i64),
}

/// The answer to "which epoch is the last committed, and how is it proven?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastCommitted {
    /// Proven by the marker (raised to the epoch this instance committed itself, which counts
    /// before its marker reads back).
    Marker(Epoch),
    /// No marker: read the identity, then ask [`without_marker`].
    ReadIdentity,
    /// The sink has history: run the bounded witness over its topics; its epoch is the answer
    /// (none only if every partition was read back to its start without a record of the sink).
    Witness(History),
    /// No marker and no history: a brand-new sink, nothing committed; the topic is not read.
    New,
}

/// The first question: the marker (`None`: its group holds no committed offset) and the epoch
/// this instance committed itself (`known`, its tracker's).
pub fn after_marker(marker: Option<Epoch>, known: Option<Epoch>) -> LastCommitted {
    match (marker, known) {
        (Some(m), Some(k)) => LastCommitted::Marker(m.max(k)),
        (Some(m), None) | (None, Some(m)) => LastCommitted::Marker(m),
        (None, None) => LastCommitted::ReadIdentity,
    }
}

/// The second question, without a marker: whether the identity is recorded, whether a decision
/// row names the sink, and the producer epoch InitProducerId returned (`None`: a reader that
/// opened no producer cannot ask the transaction coordinator). The first source that proves
/// history wins, in the order of docs/protocol.md §1.
pub fn without_marker(
    identity: bool,
    decision_row: bool,
    producer_epoch: Option<i64>,
) -> LastCommitted {
    if identity {
        return LastCommitted::Witness(History::Identity);
    }
    if decision_row {
        return LastCommitted::Witness(History::DecisionRow);
    }
    match producer_epoch {
        Some(epoch) if epoch > 0 => LastCommitted::Witness(History::ProducerEpoch(epoch)),
        _ => LastCommitted::New,
    }
}

/// Whether an answer found without a marker may be reused by this process instead of being read
/// again: one a writer found (it asked the transaction coordinator) holds for every later read;
/// one a reader found holds only for readers (a writer's producer epoch may prove history the
/// reader could not see).
pub fn reuse_without_marker(found_by_writer: bool, writer: bool) -> bool {
    found_by_writer || !writer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_proves_it_raised_to_the_instances_own_commit() {
        assert_eq!(after_marker(Some(7), None), LastCommitted::Marker(7));
        assert_eq!(after_marker(Some(7), Some(8)), LastCommitted::Marker(8));
        assert_eq!(after_marker(Some(9), Some(8)), LastCommitted::Marker(9));
        assert_eq!(after_marker(None, Some(3)), LastCommitted::Marker(3));
        assert_eq!(after_marker(None, None), LastCommitted::ReadIdentity);
    }

    #[test]
    fn without_a_marker_the_table_of_protocol_md_section_1() {
        // | missing | present | any | ... | the witness |
        assert_eq!(
            without_marker(true, false, Some(0)),
            LastCommitted::Witness(History::Identity)
        );
        assert_eq!(
            without_marker(true, true, None),
            LastCommitted::Witness(History::Identity)
        );
        // | missing | missing, but a decision row | any | ... | the witness |
        assert_eq!(
            without_marker(false, true, Some(0)),
            LastCommitted::Witness(History::DecisionRow)
        );
        assert_eq!(
            without_marker(false, true, None),
            LastCommitted::Witness(History::DecisionRow)
        );
        // | missing | missing | > 0 | ... | the witness |
        assert_eq!(
            without_marker(false, false, Some(4)),
            LastCommitted::Witness(History::ProducerEpoch(4))
        );
        // | missing | missing, no decision row | 0 or not known | any | brand new |
        assert_eq!(without_marker(false, false, Some(0)), LastCommitted::New);
        assert_eq!(without_marker(false, false, None), LastCommitted::New);
    }

    #[test]
    fn a_readers_answer_is_not_a_writers() {
        assert!(reuse_without_marker(true, true));
        assert!(reuse_without_marker(true, false));
        assert!(reuse_without_marker(false, false));
        assert!(!reuse_without_marker(false, true));
    }
}
