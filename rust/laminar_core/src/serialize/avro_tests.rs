//! The Avro schema derived from Arrow types, and the Confluent framing of encoded rows.

use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, Decimal128Array, Int32Array, Int64Array, RecordBatch, StringArray, StructArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use serde_json::{Value, json};

use super::*;

fn names(name: &str, namespace: Option<&str>) -> AvroNames {
    AvroNames {
        name: name.into(),
        namespace: namespace.map(String::from),
    }
}

fn parsed(text: &str) -> Value {
    serde_json::from_str(text).expect("schema JSON")
}

/// Avro's zig-zag varint of a long (the specification's "Binary Encoding").
fn long(value: i64) -> Vec<u8> {
    let mut n = ((value << 1) ^ (value >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        if n < 0x80 {
            out.push(n as u8);
            return out;
        }
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
}

#[test]
fn every_type_has_its_avro_type() {
    let point = Fields::from(vec![
        Field::new("x", DataType::Int32, false),
        Field::new("y", DataType::Utf8, true),
    ]);
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("amount", DataType::Decimal128(12, 2), true),
        Field::new(
            "at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new(
            "local",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
        Field::new("day", DataType::Date32, false),
        Field::new("t", DataType::Time64(TimeUnit::Microsecond), false),
        Field::new("raw", DataType::Binary, false),
        Field::new("point", DataType::Struct(point), true),
        Field::new_list("tags", Field::new_list_field(DataType::Utf8, true), false),
        Field::new_map(
            "attrs",
            "entries",
            Field::new("keys", DataType::Utf8, false),
            Field::new("values", DataType::Int64, true),
            false,
            false,
        ),
    ]);
    let avro = parsed(&value_schema(&schema, &names("Order", Some("shop.v1"))).unwrap());
    assert_eq!(avro["name"], "Order");
    assert_eq!(avro["namespace"], "shop.v1");
    let fields = avro["fields"].as_array().unwrap();
    let by_name = |n: &str| fields.iter().find(|f| f["name"] == n).unwrap().clone();
    assert_eq!(by_name("id"), json!({"name": "id", "type": "long"}));
    assert_eq!(
        by_name("amount"),
        json!({"name": "amount", "default": null, "type": ["null",
            {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}]})
    );
    assert_eq!(
        by_name("at")["type"],
        json!({"type": "long", "logicalType": "timestamp-micros"})
    );
    assert_eq!(
        by_name("local")["type"],
        json!({"type": "long", "logicalType": "local-timestamp-millis"})
    );
    assert_eq!(
        by_name("day")["type"],
        json!({"type": "int", "logicalType": "date"})
    );
    assert_eq!(
        by_name("t")["type"],
        json!({"type": "long", "logicalType": "time-micros"})
    );
    assert_eq!(by_name("raw")["type"], json!("bytes"));
    assert_eq!(
        by_name("point")["type"],
        json!(["null", {"type": "record", "name": "point", "namespace": "shop.v1.Order",
            "fields": [{"name": "x", "type": "int"},
                       {"name": "y", "type": ["null", "string"], "default": null}]}])
    );
    assert_eq!(
        by_name("tags")["type"],
        json!({"type": "array", "items": ["null", "string"]})
    );
    assert_eq!(
        by_name("attrs")["type"],
        json!({"type": "map", "values": ["null", "long"]})
    );
}

#[test]
fn refused_types_and_names_are_config_errors_naming_the_column() {
    let cases = [
        Field::new("ns", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("secs", DataType::Time32(TimeUnit::Second), false),
        Field::new("d", DataType::Decimal128(5, -2), false),
        Field::new("order-id", DataType::Int64, false),
        Field::new_map(
            "m",
            "entries",
            Field::new("k", DataType::Int32, false),
            Field::new("v", DataType::Int32, true),
            false,
            false,
        ),
    ];
    for field in cases {
        let name = field.name().clone();
        let schema = Schema::new(vec![field]);
        match value_schema(&schema, &names("R", None)) {
            Err(CoreError::Config(message)) => assert!(message.contains(&name), "{message}"),
            other => panic!("{name}: {other:?}"),
        }
    }
    let schema = Schema::new(vec![Field::new("a", DataType::Int64, false)]);
    assert!(matches!(
        value_schema(&schema, &names("bad name", None)),
        Err(CoreError::Config(_))
    ));
}

fn batch(columns: Vec<(&str, ArrayRef, bool)>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, a, nullable)| Field::new(*n, a.data_type().clone(), *nullable))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns.into_iter().map(|(_, a, _)| a).collect(),
    )
    .unwrap()
}

fn writer(batch: &RecordBatch, id: u32) -> AvroWriter {
    AvroWriter {
        schema: value_schema(&batch.schema(), &names("R", None)).unwrap(),
        id,
    }
}

#[test]
fn rows_are_framed_with_the_schema_id_and_encoded_by_the_specification() {
    let data = batch(vec![
        ("id", Arc::new(Int64Array::from(vec![1, -300])), false),
        (
            "name",
            Arc::new(StringArray::from(vec![Some("é"), None])),
            true,
        ),
    ]);
    let chunk = encode_avro(
        &data.schema(),
        std::slice::from_ref(&data),
        &writer(&data, 0x0102_0304),
        None,
    )
    .unwrap();
    let mut first = vec![0, 1, 2, 3, 4];
    first.extend(long(1));
    first.extend([2]); // union branch 1 (string)
    first.extend(long(2));
    first.extend("é".as_bytes());
    let mut second = vec![0, 1, 2, 3, 4];
    second.extend(long(-300));
    second.extend([0]); // union branch 0 (null)
    assert_eq!(chunk.values.get(0), Some(first.as_slice()));
    assert_eq!(chunk.values.get(1), Some(second.as_slice()));
    assert!(chunk.keys.is_none());
}

#[test]
fn decimals_timestamps_lists_and_structs_encode_exactly() {
    let amount: ArrayRef = Arc::new(
        Decimal128Array::from(vec![12345, -1])
            .with_precision_and_scale(10, 2)
            .unwrap(),
    );
    let at: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![1, 2]).with_timezone("UTC"));
    let mut tags = ListBuilder::new(Int64Builder::new());
    tags.append_value([Some(7), None]);
    tags.append_value([]);
    let point: ArrayRef = Arc::new(StructArray::from(vec![(
        Arc::new(Field::new("x", DataType::Int32, false)),
        Arc::new(Int32Array::from(vec![5, 6])) as ArrayRef,
    )]));
    let data = batch(vec![
        ("amount", amount, false),
        ("at", at, false),
        ("tags", Arc::new(tags.finish()), false),
        ("point", point, false),
    ]);
    let chunk = encode_avro(
        &data.schema(),
        std::slice::from_ref(&data),
        &writer(&data, 9),
        None,
    )
    .unwrap();
    let mut expected = vec![0, 0, 0, 0, 9];
    expected.extend(long(2)); // decimal: 2 bytes, big-endian two's complement
    expected.extend(12345i16.to_be_bytes());
    expected.extend(long(1)); // timestamp-micros
    expected.extend(long(2)); // a block of 2 items
    expected.extend([2]);
    expected.extend(long(7));
    expected.extend([0]); // null item
    expected.extend(long(0)); // end of blocks
    expected.extend(long(5)); // point.x
    assert_eq!(chunk.values.get(0), Some(expected.as_slice()));
    let mut second = vec![0, 0, 0, 0, 9];
    second.extend(long(1));
    second.extend([0xff]); // -1 in one byte
    second.extend(long(2));
    second.extend(long(0)); // an empty array
    second.extend(long(6));
    assert_eq!(chunk.values.get(1), Some(second.as_slice()));
}

#[test]
fn a_null_where_the_writer_schema_has_no_null_branch_is_a_data_error() {
    let data = batch(vec![(
        "id",
        Arc::new(Int64Array::from(vec![Some(1), None])),
        true,
    )]);
    let strict = AvroWriter {
        schema: r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"}]}"#.into(),
        id: 1,
    };
    match encode_avro(&data.schema(), std::slice::from_ref(&data), &strict, None) {
        Err(CoreError::Data(message)) => assert!(message.contains("'id' row 1"), "{message}"),
        other => panic!("{other:?}"),
    }
    let missing = AvroWriter {
        schema: r#"{"type":"record","name":"R","fields":[{"name":"other","type":"long"}]}"#.into(),
        id: 1,
    };
    assert!(matches!(
        encode_avro(&data.schema(), &[data], &missing, None),
        Err(CoreError::Config(_))
    ));
}

#[test]
fn avro_keys_are_the_key_columns_own_binary_and_null_keys_are_no_key() {
    let mut names_col = StringBuilder::new();
    names_col.append_value("a");
    names_col.append_null();
    names_col.append_value("ccc");
    let data = batch(vec![
        ("k", Arc::new(names_col.finish()), true),
        ("v", Arc::new(Int64Array::from(vec![1, 2, 3])), false),
    ]);
    let key_json = key_schema(&data.schema(), "k", &names("K", None)).unwrap();
    assert_eq!(parsed(&key_json), json!("string"));
    let key = AvroKey::Avro {
        column: "k".into(),
        writer: AvroWriter {
            schema: key_json,
            id: 7,
        },
    };
    let chunk = encode_avro(
        &data.schema(),
        std::slice::from_ref(&data),
        &writer(&data, 8),
        Some(&key),
    )
    .unwrap();
    let keys = chunk.keys.unwrap();
    let mut first = vec![0, 0, 0, 0, 7];
    first.extend(long(1));
    first.extend(b"a");
    assert_eq!(keys.get(0), Some(first.as_slice()));
    assert_eq!(keys.get(1), None);
    let mut third = vec![0, 0, 0, 0, 7];
    third.extend(long(3));
    third.extend(b"ccc");
    assert_eq!(keys.get(2), Some(third.as_slice()));
    let plain = AvroKey::Plain { column: "v".into() };
    let chunk = encode_avro(
        &data.schema(),
        std::slice::from_ref(&data),
        &writer(&data, 8),
        Some(&plain),
    )
    .unwrap();
    assert_eq!(chunk.keys.unwrap().get(2), Some(b"3".as_slice()));
}
