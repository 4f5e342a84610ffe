//! The PostgreSQL prepared-transaction id (gid) of one epoch and partition of a sink: made and
//! parsed here only (docs/postgres.md, "gid format"; as psycopg's `Xid` owns its format).
//!
//! ```text
//! laminar:<sink>:<epoch>:<part>
//! ```
//!
//! `<sink>` is the sink id's UTF-8 bytes percent-encoded except ASCII letters, digits, `.`, `_`
//! and `-` (so a `:` in a sink id is `%3A` and the gid splits unambiguously on `:`). PostgreSQL
//! limits a gid to 199 bytes: when the whole gid could be longer, `<sink>` becomes the first
//! bytes of its encoding (never cut inside a `%XX`), `~` and 16 hex digits of the SHA-256 of the
//! sink id — `~` never occurs in an encoded id, so the two forms cannot be confused. Room for the
//! largest `:<epoch>:<part>` is always kept, so all of a sink's gids share one prefix.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::protocol::Epoch;
use crate::protocol::names::digest16;

/// PostgreSQL's limit: a gid "must be less than 200 bytes long".
pub const GID_MAX_BYTES: usize = 199;
/// Every gid laminar prepares starts with this.
pub const GID_PREFIX: &str = "laminar:";

/// What the encoding keeps as it is: ASCII letters, digits, `.`, `_`, `-`.
const KEPT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'.').remove(b'_').remove(b'-');
/// Marks a hashed sink id (never produced by the encoding).
const HASH_MARK: char = '~';
/// Room kept for `:<epoch>:<part>` whatever their values.
const TAIL_RESERVE: usize = ":9223372036854775807:2147483647".len();

/// The fields of a laminar gid; `sink_id` is None when the gid holds a hashed sink id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedGid {
    /// The `<sink>` field as written (encoded, maybe hashed).
    pub sink_part: String,
    /// The sink id it decodes to (None: hashed, or not valid UTF-8).
    pub sink_id: Option<String>,
    pub epoch: Epoch,
    pub part: u32,
}

/// A gid that cannot be made: a negative epoch, or one too long for PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidError(pub String);

/// The `<sink>` field of `sink_id` within `budget` bytes.
fn sink_part(sink_id: &str, budget: usize) -> String {
    let encoded = utf8_percent_encode(sink_id, KEPT).to_string();
    if encoded.len() <= budget {
        return encoded;
    }
    let hex = digest16(sink_id);
    let keep = budget.saturating_sub(HASH_MARK.len_utf8() + hex.len());
    // the encoding is ASCII, so any byte index is a character boundary
    let mut head = &encoded[..keep.min(encoded.len())];
    if let Some(cut) = head.rfind('%')
        && cut + 3 > head.len()
    {
        head = &head[..cut]; // never cut inside a %XX escape
    }
    format!("{head}{HASH_MARK}{hex}")
}

/// The prefix every gid of `sink_id` starts with (`laminar:<sink>:`).
pub fn gid_prefix(sink_id: &str) -> String {
    let budget = GID_MAX_BYTES - GID_PREFIX.len() - TAIL_RESERVE;
    format!("{GID_PREFIX}{}:", sink_part(sink_id, budget))
}

/// The gid of `sink_id`'s `epoch`, partition `part`.
pub fn make_gid(sink_id: &str, epoch: Epoch, part: u32) -> Result<String, GidError> {
    if epoch < 0 {
        return Err(GidError(format!(
            "gid needs a non-negative epoch and part, got {epoch} and {part}"
        )));
    }
    Ok(format!("{}{epoch}:{part}", gid_prefix(sink_id)))
}

fn digits(field: &str) -> bool {
    !field.is_empty() && field.bytes().all(|b| b.is_ascii_digit())
}

/// The fields of a laminar gid, or None if `gid` is not one (another prefix, another shape, or
/// numbers out of range).
pub fn parse_gid(gid: &str) -> Option<ParsedGid> {
    let rest = gid.strip_prefix(GID_PREFIX)?;
    let mut fields = rest.split(':');
    let (sink, epoch, part) = (fields.next()?, fields.next()?, fields.next()?);
    if fields.next().is_some() || sink.is_empty() || !digits(epoch) || !digits(part) {
        return None;
    }
    let sink_id = if sink.contains(HASH_MARK) {
        None
    } else {
        Some(percent_decode_str(sink).decode_utf8().ok()?.into_owned())
    };
    Some(ParsedGid {
        sink_part: sink.to_owned(),
        sink_id,
        epoch: epoch.parse().ok()?,
        part: part.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_sink_id_is_written_as_it_is() {
        assert_eq!(
            make_gid("orders-sink_1.a", 7, 0).unwrap(),
            "laminar:orders-sink_1.a:7:0"
        );
        assert_eq!(gid_prefix("s"), "laminar:s:");
    }

    #[test]
    fn colons_tildes_spaces_and_non_ascii_are_percent_encoded_and_decode_back() {
        let gid = make_gid("a:b ~ü%", 3, 2).unwrap();
        assert_eq!(gid, "laminar:a%3Ab%20%7E%C3%BC%25:3:2");
        let parsed = parse_gid(&gid).unwrap();
        assert_eq!(parsed.sink_id.as_deref(), Some("a:b ~ü%"));
        assert_eq!((parsed.epoch, parsed.part), (3, 2));
        assert_eq!(parsed.sink_part, "a%3Ab%20%7E%C3%BC%25");
    }

    #[test]
    fn a_long_sink_id_is_cut_and_hashed_within_the_limit_for_every_epoch_and_part() {
        for id in [
            "x".repeat(500),
            "ü".repeat(200),
            format!("{}:{}", "a".repeat(150), "ü".repeat(5)),
        ] {
            let prefix = gid_prefix(&id);
            let gid = make_gid(&id, i64::MAX, u32::MAX).unwrap();
            assert!(gid.starts_with(&prefix));
            assert!(gid.len() <= GID_MAX_BYTES, "{} bytes", gid.len());
            let parsed = parse_gid(&gid).unwrap();
            assert_eq!(parsed.sink_id, None, "a hashed id does not decode");
            assert!(!parsed.sink_part.contains("%~") && !parsed.sink_part.contains("%C~"));
            let (head, hash) = parsed.sink_part.rsplit_once(HASH_MARK).unwrap();
            assert_eq!(hash.len(), 16);
            assert!(utf8_percent_encode(&id, KEPT).to_string().starts_with(head));
        }
        assert_ne!(gid_prefix(&"x".repeat(500)), gid_prefix(&"x".repeat(501)));
    }

    #[test]
    fn the_longest_kept_id_is_written_whole_and_one_byte_more_is_hashed() {
        let budget = GID_MAX_BYTES - GID_PREFIX.len() - TAIL_RESERVE;
        assert_eq!(
            gid_prefix(&"a".repeat(budget)),
            format!("laminar:{}:", "a".repeat(budget))
        );
        assert!(gid_prefix(&"a".repeat(budget + 1)).contains('~'));
    }

    #[test]
    fn other_shapes_are_not_laminar_gids() {
        for gid in [
            "other:s:1:0",
            "laminar:s:1",
            "laminar:s:1:0:9",
            "laminar::1:0",
            "laminar:s:x:0",
            "laminar:s:1:",
            "laminar:s:-1:0",
            "laminar:s:99999999999999999999:0",
            "laminar:%FF:1:0",
        ] {
            assert_eq!(parse_gid(gid), None, "{gid}");
        }
        assert!(make_gid("s", -1, 0).is_err());
    }
}
