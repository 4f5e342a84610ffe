//! Data-integrity properties of the encoders: nulls survive at every position (first row of a
//! chunk, last row, across batch boundaries) in keys and values, JSON and raw; values outside
//! their type's domain are refused by every encoder alike; floats keep their shortest text.

use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    Array, ArrayRef, BinaryArray, DictionaryArray, Float16Array, Int32Array, Int64Array, ListArray,
    NullArray, RecordBatch, StringArray, Time32SecondArray, Time64NanosecondArray,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field};
use proptest::prelude::*;

use super::check_batch;
use super::json::JsonRowEncoder;
use super::kafka::{
    CHUNK_BYTES, KafkaEncoder, KafkaOptions, ValueFormat, encode_kafka, plan_kafka,
};
use super::pgcopy::{
    COPY_HEADER, COPY_TRAILER, CopyEncoder, PgColumn, encode_pg_copy, plan_pg_copy,
};
use super::text::write_json_f16;
use crate::error::CoreError;

type Record = (Option<Vec<u8>>, Option<Vec<u8>>);

fn options(value_format: ValueFormat, key: Option<&str>, value: Option<&str>) -> KafkaOptions {
    KafkaOptions {
        value_format,
        value_column: value.map(String::from),
        key_column: key.map(String::from),
    }
}

/// Every record of `batches`, through the streaming encoder with one reused chunk (what
/// `encode_kafka` and `iter_kafka` in Python both do), with chunks ending after `chunk_bytes`.
fn stream(batches: &[RecordBatch], options: &KafkaOptions, chunk_bytes: usize) -> Vec<Record> {
    let schema = batches[0].schema();
    let plan = plan_kafka(&schema, options).unwrap_or_else(|e| panic!("plan: {e}"));
    let mut encoder = KafkaEncoder::new(plan, batches.to_vec()).with_chunk_bytes(chunk_bytes);
    let mut chunk = encoder.new_chunk();
    let mut out = Vec::new();
    while encoder
        .next_chunk(&mut chunk)
        .unwrap_or_else(|e| panic!("encode: {e}"))
    {
        for i in 0..chunk.values.len() {
            let key = chunk
                .keys
                .as_ref()
                .and_then(|k| k.get(i))
                .map(<[u8]>::to_vec);
            out.push((key, chunk.values.get(i).map(<[u8]>::to_vec)));
        }
    }
    out
}

/// Every record through the collecting encoder (`serialize::kafka::encode_kafka`).
fn collected(batches: &[RecordBatch], options: &KafkaOptions) -> Vec<Record> {
    let plan = plan_kafka(&batches[0].schema(), options).unwrap_or_else(|e| panic!("plan: {e}"));
    let records = encode_kafka(&plan, batches).unwrap_or_else(|e| panic!("encode: {e}"));
    (0..records.num_rows)
        .map(|i| {
            let (key, value) = records.get(i).unwrap_or_else(|| panic!("row {i} missing"));
            (key.map(<[u8]>::to_vec), value.map(<[u8]>::to_vec))
        })
        .collect()
}

fn split(batch: &RecordBatch, cuts: &[usize]) -> Vec<RecordBatch> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (batch.num_rows() + 1)).collect();
    points.push(0);
    points.push(batch.num_rows());
    points.sort_unstable();
    points.dedup();
    points
        .windows(2)
        .map(|w| batch.slice(w[0], w[1] - w[0]))
        .collect()
}

fn nullable_bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Vec::new())),
        3 => proptest::collection::vec(any::<u8>(), 1..40).prop_map(Some),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Raw values and binary keys: a null is `None` and an empty payload `b""` at every position,
    /// whatever the chunk and batch boundaries.
    #[test]
    fn raw_values_and_byte_keys_keep_every_null(
        rows in proptest::collection::vec((nullable_bytes(), nullable_bytes()), 1..60),
        chunk_bytes in 1usize..120,
        cuts in proptest::collection::vec(any::<usize>(), 0..3),
    ) {
        let keys = BinaryArray::from_iter(rows.iter().map(|(k, _)| k.as_deref()));
        let values = BinaryArray::from_iter(rows.iter().map(|(_, v)| v.as_deref()));
        let batch = RecordBatch::try_from_iter([
            ("k", Arc::new(keys) as ArrayRef),
            ("v", Arc::new(values) as ArrayRef),
        ]).unwrap_or_else(|e| panic!("batch: {e}"));
        let batches = split(&batch, &cuts);
        let opts = options(ValueFormat::Raw, Some("k"), Some("v"));
        prop_assert_eq!(&stream(&batches, &opts, chunk_bytes), &rows);
        prop_assert_eq!(&collected(&batches, &opts), &rows);
    }

    /// JSON values with integer keys (the key's JSON text): a null key is no key at every
    /// position; the values are the rows' JSON objects.
    #[test]
    fn json_values_and_integer_keys_keep_every_null(
        ids in proptest::collection::vec(proptest::option::weighted(0.6, any::<i64>()), 1..60),
        chunk_bytes in 1usize..120,
        cuts in proptest::collection::vec(any::<usize>(), 0..3),
    ) {
        let batch = RecordBatch::try_from_iter([(
            "id",
            Arc::new(Int64Array::from(ids.clone())) as ArrayRef,
        )]).unwrap_or_else(|e| panic!("batch: {e}"));
        let expected: Vec<Record> = ids
            .iter()
            .map(|id| {
                let text = id.map_or_else(|| "null".to_string(), |v| v.to_string());
                (id.map(|v| v.to_string().into_bytes()), Some(format!("{{\"id\":{text}}}").into_bytes()))
            })
            .collect();
        let batches = split(&batch, &cuts);
        let opts = options(ValueFormat::Json, Some("id"), None);
        prop_assert_eq!(&stream(&batches, &opts, chunk_bytes), &expected);
        prop_assert_eq!(&collected(&batches, &opts), &expected);
    }

    /// String keys and raw string values, dictionary-encoded (nulls in the keys of the
    /// dictionary and among its values).
    #[test]
    fn dictionary_keys_and_values_keep_every_null(
        picks in proptest::collection::vec(proptest::option::weighted(0.7, 0i32..4), 1..50),
        chunk_bytes in 1usize..60,
    ) {
        let words = StringArray::from(vec![Some("a"), None, Some(""), Some("dd")]);
        let dictionary = DictionaryArray::<Int32Type>::try_new(
            Int32Array::from(picks.clone()),
            Arc::new(words.clone()),
        ).unwrap_or_else(|e| panic!("dictionary: {e}"));
        let column: ArrayRef = Arc::new(dictionary);
        let batch = RecordBatch::try_from_iter([("k", column.clone()), ("v", column)])
            .unwrap_or_else(|e| panic!("batch: {e}"));
        let expected: Vec<Record> = picks
            .iter()
            .map(|pick| {
                let word = pick.and_then(|p| words.is_valid(p as usize).then(|| words.value(p as usize)));
                let bytes = word.map(|w| w.as_bytes().to_vec());
                (bytes.clone(), bytes)
            })
            .collect();
        let opts = options(ValueFormat::Raw, Some("k"), Some("v"));
        prop_assert_eq!(&stream(std::slice::from_ref(&batch), &opts, chunk_bytes), &expected);
        prop_assert_eq!(&collected(&[batch], &opts), &expected);
    }

    /// COPY BINARY: a null field (length -1) at every position, in every column, whatever the
    /// chunk and batch boundaries; the chunks always split at row boundaries.
    #[test]
    fn copy_fields_keep_every_null(
        rows in proptest::collection::vec(
            (proptest::option::weighted(0.7, any::<i64>()), proptest::option::weighted(0.7, "[a-z]{0,12}")),
            1..60,
        ),
        chunk_bytes in 1usize..200,
        cuts in proptest::collection::vec(any::<usize>(), 0..3),
    ) {
        let ids = Int64Array::from(rows.iter().map(|(i, _)| *i).collect::<Vec<_>>());
        let texts = StringArray::from(rows.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>());
        let batch = RecordBatch::try_from_iter([
            ("i", Arc::new(ids) as ArrayRef),
            ("t", Arc::new(texts) as ArrayRef),
        ]).unwrap_or_else(|e| panic!("batch: {e}"));
        let batches = split(&batch, &cuts);
        let plan = plan_pg_copy(&batch.schema(), &[pg("i", "int8"), pg("t", "text")], None)
            .unwrap_or_else(|e| panic!("plan: {e}"));
        let mut encoder = CopyEncoder::new(&plan, &batches).with_chunk_bytes(chunk_bytes);
        let mut stream = Vec::new();
        let mut out = Vec::new();
        while encoder.next_chunk(&mut out).unwrap_or_else(|e| panic!("encode: {e}")) {
            prop_assert!(out.len() < chunk_bytes + 64 || stream.is_empty());
            stream.extend_from_slice(&out);
        }
        let decoded = decode_copy(&stream);
        let expected: Vec<Vec<Option<Vec<u8>>>> = rows
            .iter()
            .map(|(i, t)| {
                vec![i.map(|v| v.to_be_bytes().to_vec()), t.as_ref().map(|v| v.as_bytes().to_vec())]
            })
            .collect();
        prop_assert_eq!(decoded, expected);
    }

    /// Times of day: a value inside the day encodes the same way through JSON and COPY; one
    /// outside it is a `DataError` from the batch check that both encoders run.
    #[test]
    fn times_outside_the_day_are_refused_everywhere(value in any::<i64>()) {
        let array: ArrayRef = Arc::new(Time64NanosecondArray::from(vec![Some(0), None, Some(value)]));
        let batch = RecordBatch::try_from_iter([("t", array)]).unwrap_or_else(|e| panic!("batch: {e}"));
        let inside = (0..=86_400_000_000_000).contains(&value);
        match check_batch(&batch) {
            Ok(()) => prop_assert!(inside),
            Err(CoreError::Data(message)) => {
                prop_assert!(!inside);
                prop_assert!(message.contains("column 't' row 2"), "{}", message);
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
        let plan = plan_pg_copy(&batch.schema(), &[pg("t", "time")], None)
            .unwrap_or_else(|e| panic!("plan: {e}"));
        prop_assert_eq!(encode_pg_copy(&plan, std::slice::from_ref(&batch)).is_ok(), inside);
    }
}

fn pg(name: &str, type_name: &str) -> PgColumn {
    PgColumn {
        name: name.into(),
        type_name: type_name.into(),
        typmod: -1,
    }
}

/// The defect as filed: with real 1 MiB chunks, a null at the first row of every chunk (key and
/// raw value) was encoded as `b""`.
#[test]
fn a_null_first_row_of_every_one_mib_chunk_stays_null() {
    let big = vec![b'x'; CHUNK_BYTES / 3 + 1];
    let rows: Vec<Record> = (0..13)
        .map(|i| {
            if i % 3 == 0 {
                (None, None) // rows 0, 3, 6, … open a chunk: three big values fill one
            } else {
                (Some(format!("{i}").into_bytes()), Some(big.clone()))
            }
        })
        .collect();
    let keys = BinaryArray::from_iter(rows.iter().map(|(k, _)| k.as_deref()));
    let values = BinaryArray::from_iter(rows.iter().map(|(_, v)| v.as_deref()));
    let batch = RecordBatch::try_from_iter([
        ("k", Arc::new(keys) as ArrayRef),
        ("v", Arc::new(values) as ArrayRef),
    ])
    .unwrap_or_else(|e| panic!("batch: {e}"));
    let opts = options(ValueFormat::Raw, Some("k"), Some("v"));
    assert_eq!(
        stream(std::slice::from_ref(&batch), &opts, CHUNK_BYTES),
        rows
    );
    assert_eq!(collected(&[batch], &opts), rows);
    // the keys from the issue: [None, 1, None] → [None, b"1", None]
    let ids = RecordBatch::try_from_iter([(
        "id",
        Arc::new(Int64Array::from(vec![None, Some(1), None])) as ArrayRef,
    )])
    .unwrap_or_else(|e| panic!("batch: {e}"));
    let keys: Vec<_> = stream(
        &[ids],
        &options(ValueFormat::Json, Some("id"), None),
        1 << 20,
    )
    .into_iter()
    .map(|(k, _)| k)
    .collect();
    assert_eq!(keys, vec![None, Some(b"1".to_vec()), None]);
}

/// A null-typed key column (Spark's `lit(None)`) means no key, not the text `null`.
#[test]
fn a_null_typed_key_column_gives_no_key() {
    let batch = RecordBatch::try_from_iter([
        ("k", Arc::new(NullArray::new(3)) as ArrayRef),
        ("v", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
    ])
    .unwrap_or_else(|e| panic!("batch: {e}"));
    let opts = options(ValueFormat::Json, Some("k"), None);
    for (key, value) in stream(std::slice::from_ref(&batch), &opts, CHUNK_BYTES)
        .into_iter()
        .chain(collected(&[batch], &opts))
    {
        assert_eq!(key, None);
        assert!(value.is_some_and(|v| v.starts_with(b"{\"k\":null,")));
    }
}

/// Nested times are checked too (a list of times; a sliced list only where it reaches).
#[test]
fn nested_times_outside_the_day_are_refused() {
    let values = Time32SecondArray::from(vec![1, 86_401, 2]);
    let field = Arc::new(Field::new(
        "item",
        DataType::Time32(arrow_schema::TimeUnit::Second),
        true,
    ));
    let list = ListArray::new(
        field,
        OffsetBuffer::new(vec![0, 1, 2, 3].into()),
        Arc::new(values),
        None,
    );
    let whole = RecordBatch::try_from_iter([("l", Arc::new(list) as ArrayRef)])
        .unwrap_or_else(|e| panic!("batch: {e}"));
    assert!(matches!(check_batch(&whole), Err(CoreError::Data(m)) if m.contains("column 'l'")));
    assert!(check_batch(&whole.slice(2, 1)).is_ok());
    assert!(check_batch(&whole.slice(0, 1)).is_ok());
}

/// float16: every finite value is written as the shortest decimal that reads back to it.
#[test]
fn every_float16_has_its_shortest_text() {
    for bits in 0..=u16::MAX {
        let v = half::f16::from_bits(bits);
        if !v.is_finite() {
            continue;
        }
        let mut out = Vec::new();
        write_json_f16(&mut out, v);
        let text = String::from_utf8(out).unwrap_or_else(|e| panic!("utf8: {e}"));
        let back: f64 = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(half::f16::from_f64(back).to_bits(), bits, "{text}");
        let significant = text
            .trim_start_matches('-')
            .split(['e', 'E'])
            .next()
            .unwrap_or_default()
            .replace('.', "");
        let digits = significant
            .trim_start_matches('0')
            .trim_end_matches('0')
            .len();
        if digits > 1 && v.to_f64() != 0.0 {
            // no decimal with one digit fewer reads back to the same value
            let fewer = format!("{:.*e}", digits - 2, v.to_f64());
            let parsed: f64 = fewer.parse().unwrap_or_else(|e| panic!("{fewer}: {e}"));
            assert_ne!(
                half::f16::from_f64(parsed).to_bits(),
                bits,
                "{text} vs {fewer}"
            );
        }
    }
    let batch = RecordBatch::try_from_iter([(
        "f",
        Arc::new(Float16Array::from(vec![half::f16::from_f32(0.1)])) as ArrayRef,
    )])
    .unwrap_or_else(|e| panic!("batch: {e}"));
    let encoder = JsonRowEncoder::try_new(&batch).unwrap_or_else(|e| panic!("encoder: {e}"));
    let mut row = Vec::new();
    encoder.write_row(0, &mut row);
    assert_eq!(row, b"{\"f\":0.1}");
}

/// The fields of a COPY BINARY stream, per tuple (`None`: a NULL field).
fn decode_copy(stream: &[u8]) -> Vec<Vec<Option<Vec<u8>>>> {
    assert!(stream.starts_with(COPY_HEADER));
    assert!(stream.ends_with(COPY_TRAILER));
    let body = &stream[COPY_HEADER.len()..stream.len() - COPY_TRAILER.len()];
    let take = |at: &mut usize, n: usize| {
        let bytes = &body[*at..*at + n];
        *at += n;
        bytes
    };
    let mut at = 0;
    let mut tuples = Vec::new();
    while at < body.len() {
        let fields = i16::from_be_bytes([body[at], body[at + 1]]);
        at += 2;
        let mut tuple = Vec::new();
        for _ in 0..fields {
            let len = i32::from_be_bytes(take(&mut at, 4).try_into().unwrap_or([0; 4]));
            tuple.push(usize::try_from(len).ok().map(|n| take(&mut at, n).to_vec()));
        }
        tuples.push(tuple);
    }
    tuples
}
