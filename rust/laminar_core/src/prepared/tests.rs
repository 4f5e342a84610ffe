use super::*;
use proptest::prelude::*;
use serde_json::Value;

const VECTORS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/vectors/prepared_txn_state.json"
));

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn vectors() -> Value {
    serde_json::from_str(VECTORS).unwrap()
}

fn state_of(v: &Value) -> PreparedTxnState {
    let f = &v["fields"];
    PreparedTxnState {
        transactional_id: f["transactional_id"].as_str().map(str::to_owned),
        epoch: f["epoch"].as_i64().unwrap(),
        attempt: f["attempt"].as_u64().unwrap(),
        producer_id: f["producer_id"].as_i64().unwrap(),
        producer_epoch: i32::try_from(f["producer_epoch"].as_i64().unwrap()).unwrap(),
        record_count: f["record_count"].as_u64().unwrap(),
        created_at_ms: f["created_at_ms"].as_i64().unwrap(),
        tagged_fields: v["tagged_fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| {
                let tag = u32::try_from(pair[0].as_u64().unwrap()).unwrap();
                (tag, unhex(pair[1].as_str().unwrap()))
            })
            .collect(),
    }
}

#[test]
fn golden_valid_vectors_encode_and_decode_exactly() {
    let doc = vectors();
    let valid = doc["valid"].as_array().unwrap();
    assert!(valid.len() >= 20);
    for v in valid {
        let name = v["name"].as_str().unwrap();
        let state = state_of(v);
        let bytes = unhex(v["hex"].as_str().unwrap());
        let text = v["text"].as_str().unwrap();
        assert_eq!(state.to_bytes(), bytes, "{name}: binary");
        assert_eq!(state.to_text(), text, "{name}: text");
        assert_eq!(state.to_string(), text, "{name}: Display");
        assert_eq!(
            PreparedTxnState::decode(&bytes),
            Ok(state.clone()),
            "{name}"
        );
        assert_eq!(PreparedTxnState::decode_text(text), Ok(state), "{name}");
    }
}

#[test]
fn golden_invalid_vectors_fail_with_the_expected_kind_and_message() {
    let doc = vectors();
    let invalid = doc["invalid"].as_array().unwrap();
    assert!(invalid.len() >= 30);
    for v in invalid {
        let name = v["name"].as_str().unwrap();
        let result = match (v.get("hex"), v.get("text")) {
            (Some(h), None) => PreparedTxnState::decode(&unhex(h.as_str().unwrap())),
            (None, Some(t)) => PreparedTxnState::decode_text(t.as_str().unwrap()),
            _ => panic!("{name}: a vector has either hex or text"),
        };
        let err = result.expect_err(name);
        assert_eq!(
            err.kind.name(),
            v["error"].as_str().unwrap(),
            "{name}: {err}"
        );
        let expected = v["message_contains"].as_str().unwrap();
        assert!(
            err.to_string().contains(expected),
            "{name}: {err:?} lacks {expected:?}"
        );
        let core: CoreError = err.into();
        assert!(matches!(core, CoreError::InvalidStateEncoding(m) if m.contains(expected)));
    }
}

/// Byte layout checked by hand, independently of both encoders.
#[test]
fn hand_checked_null_id_vector() {
    #[rustfmt::skip]
    let body: &[u8] = &[
        0x4c, 0x4d, // "LM"
        0x01,       // format version 1
        0x00,       // transactional_id: uvarint(0) = null
        0x00,       // epoch 0: zigzag(0) = 0
        0x00,       // attempt 0
        0x01,       // producer_id -1 (unknown): zigzag(-1) = 1
        0x01,       // producer_epoch -1 (unknown): zigzag(-1) = 1
        0x00,       // record_count 0
        0x00,       // created_at_ms 0
        0x00,       // no tagged fields
    ];
    let mut expected = body.to_vec();
    // CRC-32C of the 11 bytes above, big-endian (also in the golden file: ...a1da2165).
    expected.extend_from_slice(&[0xa1, 0xda, 0x21, 0x65]);
    assert_eq!(crc32c::crc32c(body), 0xa1da_2165);
    let state = PreparedTxnState::new(None, 0);
    assert_eq!(state.to_bytes(), expected);
    assert_eq!(state.to_text(), "lm1.TE0BAAAAAQEAAACh2iFl");
}

/// Byte layout checked by hand, independently of both encoders.
#[test]
fn hand_checked_typical_vector() {
    // created_at_ms 1_700_000_000_000 → zigzag doubles it → 3_400_000_000_000, whose 7-bit groups
    // (least significant first) are 0x00, 0x20, 0x2b, 0x7e, 0x79, 0x62:
    let groups: [u64; 6] = [0x00, 0x20, 0x2b, 0x7e, 0x79, 0x62];
    let value: u64 = groups.iter().enumerate().map(|(i, g)| g << (7 * i)).sum();
    assert_eq!(value, 3_400_000_000_000);
    #[rustfmt::skip]
    let body: &[u8] = &[
        0x4c, 0x4d, 0x01,  // "LM", version 1
        0x0e,              // transactional_id length 13 + 1
        b'o', b'r', b'd', b'e', b'r', b's', b'-', b's', b'i', b'n', b'k', b'-', b'0',
        0x54,              // epoch 42: zigzag 84 = 0x54
        0x01,              // attempt 1
        0xd0, 0x0f,        // producer_id 1000: zigzag 2000 = 0b1111_1010000 → 0x50|0x80, 0x0f
        0x06,              // producer_epoch 3: zigzag 6
        0x88, 0x27,        // record_count 5000 = 39 * 128 + 8 → 0x08|0x80, 0x27
        0x80, 0xa0, 0xab, 0xfe, 0xf9, 0x62, // created_at_ms: the groups above, continuation bits set
        0x00,              // no tagged fields
    ];
    let mut expected = body.to_vec();
    expected.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
    assert_eq!(crc32c::crc32c(body), 0xe6dd_21e4);
    let state = PreparedTxnState {
        transactional_id: Some("orders-sink-0".into()),
        epoch: 42,
        attempt: 1,
        producer_id: 1000,
        producer_epoch: 3,
        record_count: 5000,
        created_at_ms: 1_700_000_000_000,
        tagged_fields: TaggedFields::new(),
    };
    assert_eq!(state.to_bytes(), expected);
}

#[test]
fn a_100_byte_id_fits_varchar_255_whatever_the_other_fields() {
    let state = PreparedTxnState {
        transactional_id: Some("x".repeat(100)),
        epoch: i64::MIN,
        attempt: u64::MAX,
        producer_id: i64::MIN,
        producer_epoch: i32::MIN,
        record_count: u64::MAX,
        created_at_ms: i64::MIN,
        tagged_fields: TaggedFields::new(),
    };
    assert!(state.to_text().len() <= 255, "{}", state.to_text().len());
}

#[derive(Debug, PartialEq)]
struct OffsetRange {
    partition: i32,
    first: i64,
    last: i64,
}

impl TaggedField for OffsetRange {
    const TAG: u32 = 42;
    const NAME: &'static str = "offset_range";
    fn encode_value(&self, w: &mut Writer) {
        w.varint(self.partition);
        w.varlong(self.first);
        w.varlong(self.last);
    }
    fn decode_value(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            partition: r.varint("partition")?,
            first: r.varlong("first")?,
            last: r.varlong("last")?,
        })
    }
}

#[test]
fn typed_tagged_fields_round_trip_and_old_readers_keep_them() {
    let mut state = PreparedTxnState::new(Some("s".into()), 3);
    let range = OffsetRange {
        partition: 2,
        first: 100,
        last: 250,
    };
    state.tagged_fields.set(&range);
    let bytes = state.to_bytes();
    let decoded = PreparedTxnState::decode(&bytes).unwrap();
    assert_eq!(decoded.tagged_fields.get::<OffsetRange>(), Ok(Some(range)));
    // A reader that does not know tag 42 keeps its bytes and writes them back unchanged.
    assert_eq!(decoded.to_bytes(), bytes);
    // A value with bytes left over is refused, naming the field.
    let mut bad = TaggedFields::new();
    bad.insert_raw(42, vec![0x04, 0x02, 0x04, 0x00]);
    let err = bad.get::<OffsetRange>().unwrap_err();
    assert_eq!(err.kind, DecodeErrorKind::TrailingBytes);
    assert!(err.message.contains("offset_range (tag 42)"), "{err}");
    assert_eq!(TaggedFields::new().get::<OffsetRange>(), Ok(None));
}

#[test]
fn newer_version_message_tells_to_upgrade() {
    let mut bytes = PreparedTxnState::new(None, 1).to_bytes();
    bytes[2] = 7;
    let n = bytes.len();
    let crc = crc32c::crc32c(&bytes[..n - 4]).to_be_bytes();
    bytes[n - 4..].copy_from_slice(&crc);
    let err = PreparedTxnState::from_bytes(&bytes).unwrap_err();
    assert_eq!(
        err,
        CoreError::InvalidStateEncoding(
            "invalid prepared transaction state (newer_version): it was written by a newer \
             laminar (format version 7); this laminar reads format version 1: upgrade laminar"
                .into()
        )
    );
}

#[test]
fn validate_accepts_ordinary_states() {
    assert_eq!(
        PreparedTxnState::new(Some("a".into()), 0).validate(),
        Ok(())
    );
}

fn arb_state() -> impl Strategy<Value = PreparedTxnState> {
    (
        proptest::option::of(".{0,40}"),
        any::<i64>(),
        any::<u64>(),
        any::<i64>(),
        any::<i32>(),
        any::<u64>(),
        any::<i64>(),
        proptest::collection::btree_map(
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..40),
            0..5,
        ),
    )
        .prop_map(
            |(id, epoch, attempt, pid, pepoch, count, created, tags)| PreparedTxnState {
                transactional_id: id,
                epoch,
                attempt,
                producer_id: pid,
                producer_epoch: pepoch,
                record_count: count,
                created_at_ms: created,
                tagged_fields: tags.into_iter().collect(),
            },
        )
}

/// Replaces the checksum so that a mutated body reaches the field parser.
fn reseal(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.len() >= 7 {
        let n = bytes.len();
        let crc = crc32c::crc32c(&bytes[..n - 4]).to_be_bytes();
        bytes[n - 4..].copy_from_slice(&crc);
    }
    bytes
}

/// Whatever is accepted re-encodes to exactly the input (the encoding is canonical).
fn check_canonical(bytes: &[u8]) {
    if let Ok(state) = PreparedTxnState::decode(bytes) {
        assert_eq!(state.to_bytes(), bytes, "accepted input must be canonical");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn binary_round_trip(state in arb_state()) {
        let bytes = state.to_bytes();
        let decoded = PreparedTxnState::decode(&bytes).unwrap();
        prop_assert_eq!(&decoded, &state);
        prop_assert_eq!(decoded.to_bytes(), bytes);
    }

    #[test]
    fn text_round_trip(state in arb_state()) {
        let text = state.to_text();
        prop_assert!(text.starts_with(TEXT_PREFIX));
        prop_assert!(text.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
        let decoded = PreparedTxnState::decode_text(&text).unwrap();
        prop_assert_eq!(decoded.to_text(), text);
        prop_assert_eq!(decoded, state);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        check_canonical(&bytes);
        check_canonical(&reseal(bytes.clone()));
        let mut with_header = b"LM\x01".to_vec();
        with_header.extend_from_slice(&bytes);
        with_header.extend_from_slice(&[0; 4]);
        check_canonical(&reseal(with_header));
    }

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,80}", tail in "[A-Za-z0-9_-]{0,80}") {
        let _ = PreparedTxnState::decode_text(&text);
        let candidate = format!("{TEXT_PREFIX}{tail}");
        if let Ok(state) = PreparedTxnState::decode_text(&candidate) {
            prop_assert_eq!(state.to_text(), candidate);
        }
    }

    #[test]
    fn bit_flips_and_truncations_of_valid_encodings_never_panic(
        state in arb_state(),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = state.to_bytes();
        let mut flipped = bytes.clone();
        let i = flip.index(flipped.len());
        flipped[i] ^= 1 << bit;
        // The checksum catches every single-bit flip.
        prop_assert!(PreparedTxnState::decode(&flipped).is_err());
        check_canonical(&reseal(flipped));
        let truncated = &bytes[..cut.index(bytes.len())];
        prop_assert!(PreparedTxnState::decode(truncated).is_err());
        check_canonical(&reseal(truncated.to_vec()));
    }
}

/// A deterministic fuzz run: many random, mutated and re-sealed inputs through both decoders.
#[test]
fn fuzz_many_random_and_mutated_inputs() {
    // xorshift64*: deterministic, no extra dependency.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let doc = vectors();
    let seeds: Vec<Vec<u8>> = doc["valid"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| unhex(v["hex"].as_str().unwrap()))
        .collect();
    let mut accepted = 0usize;
    for round in 0..60_000u64 {
        let r = next();
        let mut input = if round % 4 == 0 {
            let len = (r % 64) as usize;
            (0..len).map(|_| next() as u8).collect()
        } else {
            seeds[(r % seeds.len() as u64) as usize].clone()
        };
        // 1-4 mutations: flip, overwrite, insert, delete, truncate.
        for _ in 0..=(next() % 4) {
            let m = next();
            let len = input.len();
            match m % 5 {
                0 if len > 0 => input[(m >> 8) as usize % len] ^= 1 << ((m >> 4) % 8),
                1 if len > 0 => input[(m >> 8) as usize % len] = (m >> 16) as u8,
                2 => input.insert((m >> 8) as usize % (len + 1), (m >> 16) as u8),
                3 if len > 0 => {
                    input.remove((m >> 8) as usize % len);
                }
                4 => input.truncate((m >> 8) as usize % (len + 1)),
                _ => {}
            }
        }
        let input = if round % 2 == 0 { reseal(input) } else { input };
        if PreparedTxnState::decode(&input).is_ok() {
            accepted += 1;
        }
        check_canonical(&input);
        let text = format!("{TEXT_PREFIX}{}", URL_SAFE_NO_PAD.encode(&input));
        if let Ok(state) = PreparedTxnState::decode_text(&text) {
            assert_eq!(state.to_text(), text);
        }
        // Text-level mutation: garble one character.
        let mut garbled = text.into_bytes();
        let i = (next() as usize) % garbled.len();
        garbled[i] = b"A-_=.+/ \xc3"[(next() % 9) as usize];
        if let Ok(s) = std::str::from_utf8(&garbled) {
            let _ = PreparedTxnState::decode_text(s);
        }
    }
    // Re-sealed mutations of valid seeds sometimes stay valid: the canonical check ran on them.
    assert!(accepted > 0);
}
