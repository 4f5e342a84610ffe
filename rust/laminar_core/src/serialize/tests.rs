//! Unit and property tests of the encoders (no Python, no servers).

use std::sync::Arc;

use arrow_array::builder::{
    Int32Builder, ListBuilder, MapBuilder, StringBuilder, StringDictionaryBuilder,
};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Decimal256Array,
    DurationMicrosecondArray, FixedSizeBinaryArray, Float16Array, Float32Array, Float64Array,
    Int8Array, Int32Array, Int64Array, LargeStringArray, NullArray, RecordBatch, StringArray,
    StringViewArray, StructArray, Time64MicrosecondArray, TimestampMicrosecondArray,
    TimestampNanosecondArray, TimestampSecondArray, UInt64Array, UnionArray,
};
use arrow_buffer::{ScalarBuffer, i256};
use arrow_schema::{DataType, Field, Fields, Schema, UnionFields};
use proptest::prelude::*;

use super::check_batch;
use super::json::{JsonRowEncoder, check_json_schema, encode_values};
use super::kafka::{KafkaEncoder, KafkaOptions, ValueFormat, encode_kafka, plan_kafka};
use super::pgcopy::{COPY_HEADER, PgColumn, encode_pg_copy, plan_pg_copy};
use crate::error::CoreError;

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).unwrap_or_else(|e| panic!("test batch: {e}"))
}

fn json_of(array: ArrayRef) -> Vec<String> {
    encode_values("c", &array)
        .unwrap_or_else(|e| panic!("encode: {e}"))
        .into_iter()
        .map(|v| String::from_utf8(v).unwrap_or_else(|e| panic!("utf8: {e}")))
        .collect()
}

fn rows_of(batch: &RecordBatch) -> Vec<String> {
    let enc = JsonRowEncoder::try_new(batch).unwrap_or_else(|e| panic!("encoder: {e}"));
    (0..batch.num_rows())
        .map(|i| {
            let mut out = Vec::new();
            enc.write_row(i, &mut out);
            String::from_utf8(out).unwrap_or_else(|e| panic!("utf8: {e}"))
        })
        .collect()
}

#[test]
fn json_rows_keep_column_order_and_nulls() {
    let b = batch(vec![
        (
            "z",
            Arc::new(Int64Array::from(vec![Some(1), None])) as ArrayRef,
        ),
        (
            "a",
            Arc::new(StringArray::from(vec![None, Some("x")])) as ArrayRef,
        ),
        (
            "m",
            Arc::new(BooleanArray::from(vec![true, false])) as ArrayRef,
        ),
    ]);
    assert_eq!(
        rows_of(&b),
        vec![
            r#"{"z":1,"a":null,"m":true}"#,
            r#"{"z":null,"a":"x","m":false}"#
        ]
    );
}

#[test]
fn json_scalars_exact_text() {
    assert_eq!(
        json_of(Arc::new(Int64Array::from(vec![i64::MIN, i64::MAX]))),
        vec![i64::MIN.to_string(), i64::MAX.to_string()]
    );
    assert_eq!(
        json_of(Arc::new(UInt64Array::from(vec![u64::MAX]))),
        vec![u64::MAX.to_string()]
    );
    assert_eq!(
        json_of(Arc::new(Float64Array::from(vec![
            0.1,
            -0.0,
            1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY
        ]))),
        vec![
            "0.1",
            "-0.0",
            "1e+300",
            "\"NaN\"",
            "\"Infinity\"",
            "\"-Infinity\""
        ]
    );
    assert_eq!(
        json_of(Arc::new(Float32Array::from(vec![0.1f32]))),
        vec!["0.1"]
    );
    assert_eq!(
        json_of(Arc::new(Float16Array::from(vec![half::f16::from_f32(1.5)]))),
        vec!["1.5"]
    );
    let max38 = 10i128.pow(38) - 1;
    let dec = Decimal128Array::from(vec![Some(12345), Some(-5), Some(max38), None])
        .with_precision_and_scale(38, 2)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        json_of(Arc::new(dec)),
        vec![
            "123.45".to_string(),
            "-0.05".to_string(),
            format!("{}.99", "9".repeat(36)),
            "null".to_string()
        ]
    );
    let big = i256::from_i128(i128::MAX).wrapping_mul(i256::from_i128(1000));
    let dec256 = Decimal256Array::from(vec![big])
        .with_precision_and_scale(76, 3)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        json_of(Arc::new(dec256)),
        vec![format!("{}.000", i128::MAX)]
    );
}

#[test]
fn json_temporal_text() {
    let ts = TimestampMicrosecondArray::from(vec![1_704_164_645_123_456]).with_timezone("UTC");
    assert_eq!(
        json_of(Arc::new(ts)),
        vec!["\"2024-01-02T03:04:05.123456Z\""]
    );
    // A non-UTC zone is still written as the UTC instant.
    let ts = TimestampSecondArray::from(vec![0]).with_timezone("+05:00");
    assert_eq!(json_of(Arc::new(ts)), vec!["\"1970-01-01T00:00:00Z\""]);
    let naive = TimestampNanosecondArray::from(vec![-1]);
    assert_eq!(
        json_of(Arc::new(naive)),
        vec!["\"1969-12-31T23:59:59.999999999\""]
    );
    assert_eq!(
        json_of(Arc::new(Date32Array::from(vec![19_724]))),
        vec!["\"2024-01-02\""]
    );
    assert_eq!(
        json_of(Arc::new(Time64MicrosecondArray::from(vec![3_723_000_001]))),
        vec!["\"01:02:03.000001\""]
    );
    assert_eq!(
        json_of(Arc::new(DurationMicrosecondArray::from(vec![-1_500_000]))),
        vec!["\"-PT1.500000S\""]
    );
}

#[test]
fn json_strings_binary_and_views() {
    let s = "q\"\\\n\u{0}\u{1f}é𝄞";
    assert_eq!(
        json_of(Arc::new(StringArray::from(vec![s]))),
        vec!["\"q\\\"\\\\\\n\\u0000\\u001fé𝄞\""]
    );
    assert_eq!(
        json_of(Arc::new(LargeStringArray::from(vec!["x"]))),
        vec!["\"x\""]
    );
    assert_eq!(
        json_of(Arc::new(StringViewArray::from(vec![
            "a long string beyond twelve bytes"
        ]))),
        vec!["\"a long string beyond twelve bytes\""]
    );
    assert_eq!(
        json_of(Arc::new(BinaryArray::from(vec![
            b"\x00\xff\x10".as_slice()
        ]))),
        vec!["\"AP8Q\""]
    );
    let fixed = FixedSizeBinaryArray::try_from_iter(vec![b"ab".to_vec()].into_iter())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json_of(Arc::new(fixed)), vec!["\"YWI=\""]);
}

#[test]
fn json_nested_types() {
    let mut list = ListBuilder::new(Int32Builder::new());
    list.append_value([Some(1), None, Some(3)]);
    list.append_null();
    list.append_value([]);
    assert_eq!(
        json_of(Arc::new(list.finish())),
        vec!["[1,null,3]", "null", "[]"]
    );

    let s = StructArray::from(vec![
        (
            Arc::new(Field::new("a", DataType::Int32, true)),
            Arc::new(Int32Array::from(vec![Some(1), None])) as ArrayRef,
        ),
        (
            Arc::new(Field::new("b\"", DataType::Utf8, true)),
            Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef,
        ),
    ]);
    assert_eq!(
        json_of(Arc::new(s)),
        vec![r#"{"a":1,"b\"":"x"}"#, r#"{"a":null,"b\"":"y"}"#]
    );

    let mut map = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    map.keys().append_value("k");
    map.values().append_value(1);
    map.keys().append_value("n");
    map.values().append_null();
    map.append(true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json_of(Arc::new(map.finish())), vec![r#"{"k":1,"n":null}"#]);

    let mut int_map = MapBuilder::new(None, Int32Builder::new(), StringBuilder::new());
    int_map.keys().append_value(7);
    int_map.values().append_value("v");
    int_map.append(true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json_of(Arc::new(int_map.finish())), vec![r#"{"7":"v"}"#]);

    let mut dict = StringDictionaryBuilder::<Int32Type>::new();
    dict.append_value("red");
    dict.append_null();
    dict.append_value("red");
    assert_eq!(
        json_of(Arc::new(dict.finish())),
        vec!["\"red\"", "null", "\"red\""]
    );
    assert_eq!(json_of(Arc::new(NullArray::new(1))), vec!["null"]);
}

fn union_array() -> ArrayRef {
    let fields = UnionFields::try_new(vec![0], vec![Field::new("i", DataType::Int32, true)])
        .unwrap_or_else(|e| panic!("{e}"));
    let array = UnionArray::try_new(
        fields,
        ScalarBuffer::from(vec![0i8]),
        None,
        vec![Arc::new(Int32Array::from(vec![1])) as ArrayRef],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    Arc::new(array)
}

#[test]
fn unsupported_types_are_config_errors_naming_the_column() {
    let b = batch(vec![
        ("ok", Arc::new(Int32Array::from(vec![1])) as ArrayRef),
        ("u", union_array()),
    ]);
    let err = check_json_schema(&b.schema()).err();
    match err {
        Some(CoreError::Config(m)) => {
            assert!(m.contains("column 'u'") && m.contains("Union"), "{m}");
        }
        other => panic!("expected a Config error, got {other:?}"),
    }
    let plan = plan_kafka(
        &b.schema(),
        &KafkaOptions {
            value_format: ValueFormat::Json,
            value_column: None,
            key_column: None,
        },
    );
    assert!(matches!(plan, Err(CoreError::Config(_))));
}

#[test]
fn kafka_keys_and_raw_values() {
    let b = batch(vec![
        (
            "id",
            Arc::new(Int64Array::from(vec![Some(-7), None])) as ArrayRef,
        ),
        (
            "s",
            Arc::new(StringArray::from(vec![Some("k1"), None])) as ArrayRef,
        ),
        (
            "bin",
            Arc::new(BinaryArray::from(vec![Some(b"\x00v".as_slice()), None])) as ArrayRef,
        ),
        ("d", Arc::new(Date32Array::from(vec![0, 1])) as ArrayRef),
    ]);
    let opts = |fmt, value: Option<&str>, key: Option<&str>| KafkaOptions {
        value_format: fmt,
        value_column: value.map(String::from),
        key_column: key.map(String::from),
    };
    let run = |o: KafkaOptions| {
        let plan = plan_kafka(&b.schema(), &o).unwrap_or_else(|e| panic!("{e}"));
        encode_kafka(&plan, std::slice::from_ref(&b)).unwrap_or_else(|e| panic!("{e}"))
    };
    let r = run(opts(ValueFormat::Json, None, Some("id")));
    assert_eq!(r.num_rows, 2);
    assert_eq!(r.get(0).and_then(|(k, _)| k), Some(b"-7".as_slice()));
    assert_eq!(r.get(1).map(|(k, _)| k), Some(None));
    let r = run(opts(ValueFormat::Raw, Some("bin"), Some("s")));
    assert_eq!(
        r.get(0),
        Some((Some(b"k1".as_slice()), Some(b"\x00v".as_slice())))
    );
    assert_eq!(r.get(1), Some((None, None)));
    let r = run(opts(ValueFormat::Raw, Some("s"), Some("d")));
    assert_eq!(
        r.get(1).and_then(|(k, _)| k),
        Some(b"\"1970-01-02\"".as_slice())
    );
    assert!(matches!(
        plan_kafka(&b.schema(), &opts(ValueFormat::Raw, None, None)),
        Err(CoreError::Config(_))
    ));
    assert!(matches!(
        plan_kafka(&b.schema(), &opts(ValueFormat::Raw, Some("id"), None)),
        Err(CoreError::Config(_))
    ));
    assert!(matches!(
        plan_kafka(&b.schema(), &opts(ValueFormat::Json, None, Some("missing"))),
        Err(CoreError::Config(_))
    ));
    assert!(ValueFormat::parse("avro").is_err());
}

#[test]
fn kafka_chunks_cover_every_row_in_order() {
    let n = 50_000;
    let strings: Vec<String> = (0..n).map(|i| format!("{i:060}")).collect();
    let b = batch(vec![(
        "s",
        Arc::new(StringArray::from(strings.clone())) as ArrayRef,
    )]);
    let plan = plan_kafka(
        &b.schema(),
        &KafkaOptions {
            value_format: ValueFormat::Raw,
            value_column: None,
            key_column: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let r = encode_kafka(&plan, &[b.clone(), b]).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.chunks.len() > 1);
    assert_eq!(r.num_rows, 2 * n);
    assert_eq!(r.value_bytes, 2 * n * 60);
    for i in [0, 1, n - 1, n, 2 * n - 1] {
        assert_eq!(
            r.get(i).and_then(|(_, v)| v),
            Some(strings[i % n].as_bytes())
        );
    }
}

#[test]
fn a_kafka_encoder_is_done_once_its_last_row_is_encoded() {
    let strings: Vec<String> = (0..40_000).map(|i| format!("{i:060}")).collect();
    let b = batch(vec![(
        "s",
        Arc::new(StringArray::from(strings)) as ArrayRef,
    )]);
    let empty = b.slice(0, 0);
    let options = KafkaOptions {
        value_format: ValueFormat::Raw,
        value_column: None,
        key_column: None,
    };
    let plan = plan_kafka(&b.schema(), &options).unwrap_or_else(|e| panic!("{e}"));
    let mut encoder = KafkaEncoder::new(plan, vec![b, empty]);
    let mut chunk = encoder.new_chunk();
    let mut rows = 0;
    assert!(!encoder.is_done());
    while encoder
        .next_chunk(&mut chunk)
        .unwrap_or_else(|e| panic!("{e}"))
    {
        rows += chunk.values.len();
        // done exactly when every row was handed out (a trailing empty batch has none)
        assert_eq!(encoder.is_done(), rows == 40_000);
    }
    assert_eq!(rows, 40_000);
    assert!(encoder.is_done());
}

// --- COPY BINARY ---------------------------------------------------------------------------

fn col(name: &str, type_name: &str, typmod: i32) -> PgColumn {
    PgColumn {
        name: name.into(),
        type_name: type_name.into(),
        typmod,
    }
}

fn copy_bytes(b: &RecordBatch, cols: &[PgColumn]) -> Result<Vec<u8>, CoreError> {
    let plan = plan_pg_copy(&b.schema(), cols, None)?;
    Ok(encode_pg_copy(&plan, std::slice::from_ref(b))?
        .chunks
        .concat())
}

#[test]
fn copy_layout_header_tuples_trailer() {
    let b = batch(vec![
        (
            "a",
            Arc::new(Int32Array::from(vec![Some(1), None])) as ArrayRef,
        ),
        ("t", Arc::new(StringArray::from(vec!["hé", ""])) as ArrayRef),
    ]);
    let out = copy_bytes(&b, &[col("a", "int8", -1), col("t", "text", -1)])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut expected = COPY_HEADER.to_vec();
    expected.extend_from_slice(&[0, 2, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1]);
    expected.extend_from_slice(&[0, 0, 0, 3, b'h', 0xc3, 0xa9]);
    expected.extend_from_slice(&[0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    expected.extend_from_slice(&[0xff, 0xff]);
    assert_eq!(out, expected);
    assert_eq!(&out[..11], b"PGCOPY\n\xff\r\n\0");
}

#[test]
fn copy_narrowing_is_checked_per_value() {
    let b = batch(vec![(
        "a",
        Arc::new(Int64Array::from(vec![1, 40_000])) as ArrayRef,
    )]);
    match copy_bytes(&b, &[col("a", "int2", -1)]) {
        Err(CoreError::Data(m)) => assert!(m.contains("'a' row 1") && m.contains("int2"), "{m}"),
        other => panic!("expected Data error, got {other:?}"),
    }
    let b = batch(vec![(
        "s",
        Arc::new(StringArray::from(vec!["abcd", "abcdé"])) as ArrayRef,
    )]);
    // varchar(4): typmod 8.
    match copy_bytes(&b, &[col("s", "varchar", 8)]) {
        Err(CoreError::Data(m)) => assert!(m.contains("row 1") && m.contains("varchar(4)"), "{m}"),
        other => panic!("expected Data error, got {other:?}"),
    }
    let b = batch(vec![(
        "s",
        Arc::new(StringArray::from(vec!["nul\0"])) as ArrayRef,
    )]);
    assert!(matches!(
        copy_bytes(&b, &[col("s", "text", -1)]),
        Err(CoreError::Data(_))
    ));
    let b = batch(vec![(
        "u",
        Arc::new(StringArray::from(vec!["not-a-uuid"])) as ArrayRef,
    )]);
    assert!(matches!(
        copy_bytes(&b, &[col("u", "uuid", -1)]),
        Err(CoreError::Data(_))
    ));
    let b = batch(vec![(
        "j",
        Arc::new(StringArray::from(vec!["{bad"])) as ArrayRef,
    )]);
    assert!(matches!(
        copy_bytes(&b, &[col("j", "jsonb", -1)]),
        Err(CoreError::Data(_))
    ));
}

#[test]
fn copy_incompatible_types_are_config_errors() {
    let b = batch(vec![(
        "a",
        Arc::new(StringArray::from(vec!["1"])) as ArrayRef,
    )]);
    match plan_pg_copy(&b.schema(), &[col("a", "int4", -1)], None) {
        Err(CoreError::Config(m)) => {
            assert!(
                m.contains("'a'") && m.contains("Utf8") && m.contains("int4"),
                "{m}"
            );
        }
        other => panic!("expected Config error, got {other:?}"),
    }
    assert!(matches!(
        plan_pg_copy(&b.schema(), &[col("a", "point", -1)], None),
        Err(CoreError::Config(_))
    ));
    assert!(matches!(
        plan_pg_copy(&b.schema(), &[col("x", "text", -1)], None),
        Err(CoreError::Config(_))
    ));
    assert!(matches!(
        plan_pg_copy(&b.schema(), &[col("a", "text", -1)], Some(&[])),
        Err(CoreError::Config(_))
    ));
}

#[test]
fn copy_arrays_with_null_elements() {
    let mut list = ListBuilder::new(Int32Builder::new());
    list.append_value([Some(5), None]);
    list.append_value([]);
    let b = batch(vec![("l", Arc::new(list.finish()) as ArrayRef)]);
    let out = copy_bytes(&b, &[col("l", "_int4", -1)]).unwrap_or_else(|e| panic!("{e}"));
    let body = &out[COPY_HEADER.len()..];
    let mut expected = vec![0, 1];
    let payload: Vec<u8> = [
        1i32.to_be_bytes(),
        1i32.to_be_bytes(),
        23i32.to_be_bytes(),
        2i32.to_be_bytes(),
        1i32.to_be_bytes(),
        4i32.to_be_bytes(),
        5i32.to_be_bytes(),
        (-1i32).to_be_bytes(),
    ]
    .concat();
    expected.extend_from_slice(&(payload.len() as i32).to_be_bytes());
    expected.extend_from_slice(&payload);
    expected.extend_from_slice(&[0, 1, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 23]);
    expected.extend_from_slice(&[0xff, 0xff]);
    assert_eq!(body, expected.as_slice());
}

/// Decodes a `numeric` field body back to (negative, digits, scale) text for checking.
fn decode_numeric(body: &[u8]) -> String {
    let rd = |i: usize| i16::from_be_bytes([body[i], body[i + 1]]);
    let ndigits = rd(0) as usize;
    let weight = i64::from(rd(2));
    let sign = u16::from_be_bytes([body[4], body[5]]);
    let dscale = u16::from_be_bytes([body[6], body[7]]) as usize;
    let groups: Vec<i64> = (0..ndigits).map(|g| i64::from(rd(8 + 2 * g))).collect();
    // Integer part: groups with weight >= 0.
    let mut int_part = String::new();
    for w in (0..=weight.max(0)).rev() {
        let idx = weight - w;
        let g = if idx >= 0 && (idx as usize) < ndigits {
            groups[idx as usize]
        } else {
            0
        };
        if int_part.is_empty() {
            if g != 0 || w == 0 {
                int_part = if weight < 0 && w == 0 {
                    "0".into()
                } else {
                    g.to_string()
                };
            }
        } else {
            int_part.push_str(&format!("{g:04}"));
        }
    }
    if weight < 0 {
        int_part = "0".into();
    }
    let mut frac = String::new();
    let mut w = -1;
    while frac.len() < dscale {
        let idx = weight - w;
        let g = if idx >= 0 && (idx as usize) < ndigits {
            groups[idx as usize]
        } else {
            0
        };
        frac.push_str(&format!("{g:04}"));
        w -= 1;
    }
    frac.truncate(dscale);
    let sign = if sign == 0x4000 { "-" } else { "" };
    if dscale > 0 {
        format!("{sign}{int_part}.{frac}")
    } else {
        format!("{sign}{int_part}")
    }
}

fn numeric_text(array: ArrayRef) -> String {
    let b = batch(vec![("n", array)]);
    let out = copy_bytes(&b, &[col("n", "numeric", -1)]).unwrap_or_else(|e| panic!("{e}"));
    let field = &out[COPY_HEADER.len() + 2..out.len() - 2];
    let len = i32::from_be_bytes([field[0], field[1], field[2], field[3]]) as usize;
    assert_eq!(len, field.len() - 4);
    decode_numeric(&field[4..])
}

#[test]
fn numeric_examples() {
    let d = |v: i128, s: i8| -> ArrayRef {
        Arc::new(
            Decimal128Array::from(vec![v])
                .with_precision_and_scale(38, s)
                .unwrap_or_else(|e| panic!("{e}")),
        )
    };
    assert_eq!(numeric_text(d(12345, 2)), "123.45");
    assert_eq!(numeric_text(d(-5, 4)), "-0.0005");
    assert_eq!(numeric_text(d(0, 3)), "0.000");
    assert_eq!(numeric_text(d(10i128.pow(38) - 1, 0)), "9".repeat(38));
    assert_eq!(numeric_text(d(100_000_000, 0)), "100000000");
    assert_eq!(numeric_text(Arc::new(Int8Array::from(vec![-128]))), "-128");
    assert_eq!(numeric_text(Arc::new(Float64Array::from(vec![0.1]))), "0.1");
    assert_eq!(
        numeric_text(Arc::new(Float64Array::from(vec![1.5e-7]))),
        "0.00000015"
    );
    assert_eq!(
        numeric_text(Arc::new(Float64Array::from(vec![2e20]))),
        "200000000000000000000"
    );
}

#[test]
fn check_batch_rejects_invalid_utf8() {
    let data = arrow_data::ArrayData::builder(DataType::Binary)
        .len(1)
        .add_buffer(arrow_buffer::Buffer::from_slice_ref([0i32, 2]))
        .add_buffer(arrow_buffer::Buffer::from_slice_ref([0xffu8, 0xfe]))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    // Reinterpret the same buffers as Utf8 without validation, as a foreign producer could.
    let data = data.into_builder().data_type(DataType::Utf8);
    // SAFETY: the test builds deliberately invalid data to check that `check_batch` refuses it
    // before any encoder reads it.
    let data = unsafe { data.build_unchecked() };
    let array = arrow_array::make_array(data);
    let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
    let b = RecordBatch::try_new(schema, vec![array]).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(check_batch(&b), Err(CoreError::Data(_))));
}

#[test]
fn struct_to_jsonb_goes_through_the_json_encoder() {
    let fields = Fields::from(vec![Field::new("a", DataType::Int32, true)]);
    let s = StructArray::new(
        fields,
        vec![Arc::new(Int32Array::from(vec![7])) as ArrayRef],
        None,
    );
    let b = batch(vec![("j", Arc::new(s) as ArrayRef)]);
    let out = copy_bytes(&b, &[col("j", "jsonb", -1)]).unwrap_or_else(|e| panic!("{e}"));
    let field = &out[COPY_HEADER.len() + 2..out.len() - 2];
    assert_eq!(&field[..5], &[0, 0, 0, 8, 1]);
    assert_eq!(&field[5..], br#"{"a":7}"#);
}

proptest! {
    #[test]
    fn json_strings_round_trip(s in any::<String>()) {
        let out = json_of(Arc::new(StringArray::from(vec![s.clone()])));
        let parsed: String = serde_json::from_str(&out[0]).unwrap_or_default();
        prop_assert_eq!(parsed, s);
    }

    #[test]
    fn json_ints_and_floats_round_trip(i in any::<i64>(), f in any::<f64>()) {
        let out = json_of(Arc::new(Int64Array::from(vec![i])));
        prop_assert_eq!(out[0].parse::<i64>().ok(), Some(i));
        let out = json_of(Arc::new(Float64Array::from(vec![f])));
        if f.is_finite() {
            prop_assert_eq!(out[0].parse::<f64>().ok(), Some(f));
        } else {
            prop_assert!(out[0].starts_with('"'));
        }
    }

    #[test]
    fn json_decimals_are_exact(v in any::<i128>(), scale in -5i8..=38) {
        let v = v % 10i128.pow(38);
        let array = Decimal128Array::from(vec![v])
            .with_precision_and_scale(38, scale)
            .unwrap_or_else(|e| panic!("{e}"));
        let text = json_of(Arc::new(array)).remove(0);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        prop_assert!(value.is_number(), "{}", text);
        let digits: String = text.chars().filter(char::is_ascii_digit).collect();
        let stripped = digits.trim_start_matches('0');
        let expected = v.unsigned_abs().to_string();
        prop_assert!(stripped.starts_with(expected.trim_start_matches('0')) || v == 0);
    }

    #[test]
    fn numeric_round_trips(v in any::<i128>(), scale in 0i8..=38) {
        let v = v % 10i128.pow(38);
        let array = Decimal128Array::from(vec![v])
            .with_precision_and_scale(38, scale)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut expected = Vec::new();
        super::text::write_decimal_i128(&mut expected, v, scale);
        let expected = String::from_utf8(expected).unwrap_or_default();
        // JSON's text and numeric's decoded text agree digit for digit (except "-0" forms).
        let got = numeric_text(Arc::new(array));
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn int_narrowing_never_panics(values in proptest::collection::vec(any::<i64>(), 0..50)) {
        let b = batch(vec![("a", Arc::new(Int64Array::from(values.clone())) as ArrayRef)]);
        let fits = values.iter().all(|v| i32::try_from(*v).is_ok());
        let result = copy_bytes(&b, &[col("a", "int4", -1)]);
        prop_assert_eq!(result.is_ok(), fits);
    }

    #[test]
    fn timestamps_never_panic(v in any::<i64>()) {
        let b = batch(vec![(
            "t",
            Arc::new(TimestampSecondArray::from(vec![v]).with_timezone("UTC")) as ArrayRef,
        )]);
        let _ = rows_of(&b);
        let _ = copy_bytes(&b, &[col("t", "timestamptz", -1)]);
    }

    #[test]
    fn arbitrary_bytes_as_uuid_or_json_never_panic(s in any::<String>()) {
        let b = batch(vec![("u", Arc::new(StringArray::from(vec![s])) as ArrayRef)]);
        let _ = copy_bytes(&b, &[col("u", "uuid", -1)]);
        let _ = copy_bytes(&b, &[col("u", "jsonb", -1)]);
        let _ = copy_bytes(&b, &[col("u", "varchar", 5)]);
    }
}
