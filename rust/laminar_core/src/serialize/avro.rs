//! Arrow rows → Avro binary in the Confluent wire format (docs/kafka.md, "Avro with a Schema
//! Registry"): magic byte 0, the schema id as 4 bytes big-endian, the Avro binary datum.
//!
//! Two jobs, both pure:
//! - the **writer schema derived from an Arrow schema** ([`value_schema`], [`key_schema`]): the
//!   type mapping of docs/kafka.md, nullable fields as `["null", T]` with `"default": null`, nested
//!   records named after their field in their parent's namespace, so a name never repeats;
//! - the **encoding** of the rows against a writer schema and its registry id ([`encode_avro`]),
//!   done by the `arrow-avro` crate (Apache Arrow's own Avro reader/writer, released with the
//!   `arrow` version the core uses): its row `Encoder` frames each row with the Confluent prefix and
//!   hands back the row boundaries, so every record is one Kafka value.
//!
//! Whatever the schema came from (derived here, or the registry's by id or as its latest version),
//! a null where the schema has no null branch is a `DataError` naming the column before anything is
//! encoded: the crate would otherwise write a zero in its place.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray, OffsetSizeTrait, RecordBatch};
use arrow_avro::schema::{FingerprintStrategy, SCHEMA_METADATA_KEY};
use arrow_avro::writer::WriterBuilder;
use arrow_avro::writer::format::AvroSoeFormat;
use arrow_buffer::ArrowNativeType;
use arrow_schema::{DataType, Field, FieldRef, Schema, TimeUnit};
use serde_json::{Map, Value, json};

use super::kafka::{Payloads, RecordChunk, encode_keys};
use crate::error::{CoreError, CoreResult};

/// The name and namespace of a derived record schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvroNames {
    /// The record's name (an Avro name: `[A-Za-z_][A-Za-z0-9_]*`).
    pub name: String,
    /// Its namespace (dot-separated Avro names), or none.
    pub namespace: Option<String>,
}

/// A writer schema (Avro JSON) and the id the registry gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvroWriter {
    /// The schema, Avro JSON text.
    pub schema: String,
    /// Its registry id: the 4 bytes after the magic byte.
    pub id: u32,
}

/// How the key column becomes key bytes next to Avro values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AvroKey {
    /// The key column in Avro (a struct column as a record, any other as its type).
    Avro {
        /// The key column.
        column: String,
        /// Its writer schema and id.
        writer: AvroWriter,
    },
    /// The key column by the rules of docs/serialization.md, "Kafka keys" (text, bytes, JSON).
    Plain {
        /// The key column.
        column: String,
    },
}

/// Whether `name` is an Avro name (the specification's "Names").
fn is_avro_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn check_name(name: &str, what: &str) -> CoreResult<()> {
    if is_avro_name(name) {
        Ok(())
    } else {
        Err(CoreError::Config(format!(
            "{what} '{name}' is not an Avro name (letters, digits and '_', not starting with a \
             digit); rename it (e.g. with withColumnRenamed / alias) before writing Avro"
        )))
    }
}

fn check_names(names: &AvroNames) -> CoreResult<()> {
    check_name(&names.name, "the Avro record name")?;
    if let Some(namespace) = names.namespace.as_deref().filter(|n| !n.is_empty()) {
        for part in namespace.split('.') {
            check_name(part, "a part of the Avro namespace")?;
        }
    }
    Ok(())
}

/// The record schema of every column of `schema` (the value of a row), named by `names`.
pub fn value_schema(schema: &Schema, names: &AvroNames) -> CoreResult<String> {
    check_names(names)?;
    Ok(record(schema.fields(), names)?.to_string())
}

/// The schema of the key column `column`: a struct column is a record named by `names`, any other
/// column its Avro type (the key of a row whose key is null is no key, so never a union).
pub fn key_schema(schema: &Schema, column: &str, names: &AvroNames) -> CoreResult<String> {
    let field = key_field(schema, column)?;
    match field.data_type() {
        DataType::Struct(fields) => {
            check_names(names)?;
            Ok(record(fields, names)?.to_string())
        }
        _ => Ok(avro_type(field.name(), field, &[], false)?.to_string()),
    }
}

fn key_field<'a>(schema: &'a Schema, column: &str) -> CoreResult<&'a FieldRef> {
    schema
        .fields()
        .find(column)
        .map(|(_, field)| field)
        .ok_or_else(|| {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            CoreError::Config(format!(
                "key column '{column}' is not in the batch (columns: {names:?})"
            ))
        })
}

fn record(fields: &arrow_schema::Fields, names: &AvroNames) -> CoreResult<Value> {
    let mut path: Vec<String> = names
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .map(|n| n.split('.').map(String::from).collect())
        .unwrap_or_default();
    let mut out = Map::new();
    out.insert("type".into(), json!("record"));
    out.insert("name".into(), json!(names.name));
    if !path.is_empty() {
        out.insert("namespace".into(), json!(path.join(".")));
    }
    path.push(names.name.clone());
    out.insert("fields".into(), Value::Array(record_fields(fields, &path)?));
    Ok(Value::Object(out))
}

/// The fields of a record whose full name is `path` (its children's namespace).
fn record_fields(fields: &arrow_schema::Fields, path: &[String]) -> CoreResult<Vec<Value>> {
    fields
        .iter()
        .map(|field| {
            check_name(field.name(), "column")?;
            let mut out = Map::new();
            out.insert("name".into(), json!(field.name()));
            let nullable = field.is_nullable() && field.data_type() != &DataType::Null;
            out.insert(
                "type".into(),
                avro_type(field.name(), field, path, field.is_nullable())?,
            );
            if nullable {
                // A reader of an older schema that lacks the field reads null: adding a
                // nullable column is a compatible change under BACKWARD.
                out.insert("default".into(), Value::Null);
            }
            Ok(Value::Object(out))
        })
        .collect()
}

fn is_uuid(field: &Field) -> bool {
    field.data_type() == &DataType::FixedSizeBinary(16)
        && (matches!(field.extension_type_name(), Some("arrow.uuid" | "uuid"))
            || field.metadata().get("logicalType").map(String::as_str) == Some("uuid"))
}

fn logical(base: &str, logical_type: &str) -> Value {
    json!({ "type": base, "logicalType": logical_type })
}

/// The Avro type of `field` (named `name` for the records and fixed types it holds, in the
/// namespace `path`), as `["null", T]` when `nullable`.
fn avro_type(name: &str, field: &Field, path: &[String], nullable: bool) -> CoreResult<Value> {
    let refuse = |why: &str| {
        Err(CoreError::Config(format!(
            "column '{name}' has Arrow type {} which has no Avro type here ({why})",
            field.data_type()
        )))
    };
    let named = |kind: &str, extra: Value| -> Value {
        let mut out = Map::new();
        out.insert("type".into(), json!(kind));
        out.insert("name".into(), json!(name));
        if !path.is_empty() {
            out.insert("namespace".into(), json!(path.join(".")));
        }
        if let Value::Object(extra) = extra {
            out.extend(extra);
        }
        Value::Object(out)
    };
    let inner = |child: &Field| -> CoreResult<Value> {
        // Lists' and maps' records take the enclosing field's name.
        avro_type(name, child, path, child.is_nullable())
    };
    let decimal = |precision: u8, scale: i8| -> CoreResult<Value> {
        if scale < 0 {
            return Err(CoreError::Config(format!(
                "column '{name}' is a decimal with a negative scale ({scale}), which Avro's \
                 decimal cannot hold; cast it to a decimal with scale >= 0"
            )));
        }
        Ok(json!({
            "type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale
        }))
    };
    let base = match field.data_type() {
        DataType::Null => return Ok(json!("null")),
        DataType::Boolean => json!("boolean"),
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
            json!("int")
        }
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => json!("long"),
        DataType::Float16 | DataType::Float32 => json!("float"),
        DataType::Float64 => json!("double"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => json!("string"),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => json!("bytes"),
        DataType::FixedSizeBinary(_) if is_uuid(field) => logical("string", "uuid"),
        DataType::FixedSizeBinary(size) => named("fixed", json!({ "size": size })),
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) => decimal(*p, *s)?,
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => decimal(*p, *s)?,
        DataType::Date32 => logical("int", "date"),
        DataType::Time32(TimeUnit::Millisecond) => logical("int", "time-millis"),
        DataType::Time64(TimeUnit::Microsecond) => logical("long", "time-micros"),
        DataType::Timestamp(unit, zone) => {
            let local = if zone.is_some() { "" } else { "local-" };
            match unit {
                TimeUnit::Second | TimeUnit::Millisecond => {
                    logical("long", &format!("{local}timestamp-millis"))
                }
                TimeUnit::Microsecond => logical("long", &format!("{local}timestamp-micros")),
                TimeUnit::Nanosecond => {
                    return refuse(
                        "nanoseconds: Spark and most Avro readers know milliseconds and \
                         microseconds only; cast it to timestamp('us')",
                    );
                }
            }
        }
        DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
            json!({ "type": "array", "items": inner(item)? })
        }
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return refuse("a map whose entries are not a struct");
            };
            if kv.len() != 2
                || !matches!(
                    kv[0].data_type(),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                )
            {
                return refuse("Avro map keys are strings; cast the keys to string");
            }
            json!({ "type": "map", "values": inner(&kv[1])? })
        }
        DataType::Struct(fields) => {
            let mut child_path = path.to_vec();
            child_path.push(name.to_string());
            named(
                "record",
                json!({ "fields": record_fields(fields, &child_path)? }),
            )
        }
        DataType::Dictionary(_, value) if path.is_empty() => {
            // Decoded before encoding (`decode_dictionaries`): the value type's schema.
            let decoded = Field::new(field.name(), value.as_ref().clone(), field.is_nullable())
                .with_metadata(field.metadata().clone());
            return avro_type(name, &decoded, path, nullable);
        }
        DataType::Time32(_) | DataType::Time64(_) => {
            return refuse(
                "Avro has time-millis (time32('ms')) and time-micros (time64('us')); cast it",
            );
        }
        _ => return refuse("cast it, e.g. to string, before writing Avro"),
    };
    Ok(if nullable {
        json!(["null", base])
    } else {
        base
    })
}

/// Top-level dictionary columns decoded to their values (the crate writes a dictionary as an
/// Avro enum only; the schema above gives its value type).
fn decode_dictionaries(batch: &RecordBatch) -> CoreResult<RecordBatch> {
    let schema = batch.schema();
    if !schema
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Dictionary(..)))
    {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        match field.data_type() {
            DataType::Dictionary(_, value) => {
                let decoded = arrow_cast::cast(column, value)
                    .map_err(|e| CoreError::Data(format!("column '{}': {e}", field.name())))?;
                fields.push(Arc::new(
                    Field::new(field.name(), value.as_ref().clone(), field.is_nullable())
                        .with_metadata(field.metadata().clone()),
                ));
                columns.push(decoded);
            }
            _ => {
                fields.push(field.clone());
                columns.push(column.clone());
            }
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| CoreError::Data(format!("decoding dictionary columns: {e}")))
}

/// Whether the Avro type `avro` has a null branch.
fn accepts_null(avro: &Value) -> bool {
    match avro {
        Value::String(s) => s == "null",
        Value::Array(branches) => branches.iter().any(accepts_null),
        Value::Object(o) => o.get("type").is_some_and(|t| t == "null"),
        _ => false,
    }
}

/// The non-null branch of a union `["null", T]` (or the type itself).
fn non_null(avro: &Value) -> &Value {
    match avro {
        Value::Array(branches) => branches.iter().find(|b| !accepts_null(b)).unwrap_or(avro),
        other => other,
    }
}

/// A named type's definition, resolved when `avro` refers to it by name.
fn resolve<'a>(avro: &'a Value, named: &HashMap<String, &'a Value>) -> &'a Value {
    match avro {
        Value::String(name) => named.get(name).copied().unwrap_or(avro),
        other => other,
    }
}

/// Every named type of a schema by its name and full name.
fn named_types<'a>(avro: &'a Value, namespace: &str, out: &mut HashMap<String, &'a Value>) {
    match avro {
        Value::Array(branches) => branches.iter().for_each(|b| named_types(b, namespace, out)),
        Value::Object(o) => {
            let mut namespace = namespace.to_string();
            if let Some(Value::String(name)) = o.get("name") {
                if let Some(Value::String(ns)) = o.get("namespace") {
                    namespace = ns.clone();
                }
                let full = if name.contains('.') || namespace.is_empty() {
                    name.clone()
                } else {
                    format!("{namespace}.{name}")
                };
                out.insert(name.clone(), avro);
                out.insert(full.clone(), avro);
                if let Some((ns, _)) = full.rsplit_once('.') {
                    namespace = ns.to_string();
                }
            }
            for key in ["fields", "items", "values"] {
                match o.get(key) {
                    Some(Value::Array(fields)) => fields.iter().for_each(|f| {
                        if let Some(t) = f.get("type") {
                            named_types(t, &namespace, out);
                        }
                    }),
                    Some(t) => named_types(t, &namespace, out),
                    None => {}
                }
            }
            if let Some(t @ Value::Object(_)) = o.get("type") {
                named_types(t, &namespace, out);
            }
        }
        _ => {}
    }
}

/// A null in `array` (rows `offset..`, named `column`) where `avro` has no null branch is a
/// `DataError`; nested values are checked against their own types.
fn check_nulls(
    column: &str,
    array: &ArrayRef,
    avro: &Value,
    named: &HashMap<String, &Value>,
    top: bool,
) -> CoreResult<()> {
    let avro = resolve(avro, named);
    if array.null_count() > 0 && !accepts_null(avro) {
        let row = (0..array.len()).find(|&i| array.is_null(i)).unwrap_or(0);
        let place = if top {
            format!("row {row}")
        } else {
            "a nested value".to_string()
        };
        return Err(CoreError::Data(format!(
            "column '{column}' {place} is null, but the Avro schema's type for it has no null \
             branch ({avro}); fill the nulls or register a schema where the field is nullable"
        )));
    }
    let avro = resolve(non_null(avro), named);
    let nested =
        |child: &ArrayRef, avro_child: &Value| check_nulls(column, child, avro_child, named, false);
    match array.data_type() {
        DataType::Struct(_) => {
            let (Some(strukt), Some(Value::Array(fields))) =
                (array.as_struct_opt(), avro.get("fields"))
            else {
                return Ok(());
            };
            for field in fields {
                let (Some(Value::String(name)), Some(t)) = (field.get("name"), field.get("type"))
                else {
                    continue;
                };
                if let Some(child) = strukt.column_by_name(name) {
                    // A child's nulls under a null parent are not values: only the parent's rows.
                    let child = match strukt.nulls() {
                        Some(parent) if parent.null_count() > 0 => {
                            let kept = BooleanArray::new(parent.inner().clone(), None);
                            arrow_select::filter::filter(child, &kept)
                                .map_err(|e| CoreError::Data(format!("column '{column}': {e}")))?
                        }
                        _ => child.clone(),
                    };
                    check_nulls(column, &child, t, named, top && strukt.null_count() == 0)?;
                }
            }
            Ok(())
        }
        DataType::List(_) => {
            list_values::<i32>(array).map_or(Ok(()), |v| match avro.get("items") {
                Some(items) => nested(&v, items),
                None => Ok(()),
            })
        }
        DataType::LargeList(_) => {
            list_values::<i64>(array).map_or(Ok(()), |v| match avro.get("items") {
                Some(items) => nested(&v, items),
                None => Ok(()),
            })
        }
        DataType::FixedSizeList(_, _) => {
            match (array.as_fixed_size_list_opt(), avro.get("items")) {
                (Some(list), Some(items)) => nested(list.values(), items),
                _ => Ok(()),
            }
        }
        DataType::Map(_, _) => match (array.as_map_opt(), avro.get("values")) {
            (Some(map), Some(values)) => {
                let offsets = map.offsets();
                let (start, end) = (offsets[0].as_usize(), offsets[offsets.len() - 1].as_usize());
                nested(&map.values().slice(start, end - start), values)
            }
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// The values a list's offsets reach (a sliced list's child holds more).
fn list_values<O: OffsetSizeTrait>(array: &ArrayRef) -> Option<ArrayRef> {
    let list = array.as_list_opt::<O>()?;
    let offsets = list.offsets();
    let (start, end) = (offsets[0].as_usize(), offsets[offsets.len() - 1].as_usize());
    Some(list.values().slice(start, end - start))
}

/// Encodes `batch` (whose columns the record `writer` names) row by row, each row framed with
/// the writer's id, into `out`.
fn encode_rows(batch: &RecordBatch, writer: &AvroWriter, out: &mut Payloads) -> CoreResult<()> {
    let avro: Value = serde_json::from_str(&writer.schema)
        .map_err(|e| CoreError::Config(format!("the Avro schema is not JSON: {e}")))?;
    let mut named = HashMap::new();
    named_types(&avro, "", &mut named);
    let Some(Value::Array(fields)) = avro.get("fields") else {
        return Err(CoreError::Config(format!(
            "the Avro schema (id {}) is not a record; Laminar writes rows as records",
            writer.id
        )));
    };
    for field in fields {
        let (Some(Value::String(name)), Some(t)) = (field.get("name"), field.get("type")) else {
            continue;
        };
        let Some(column) = batch.column_by_name(name) else {
            return Err(CoreError::Config(format!(
                "the Avro schema (id {}) has a field '{name}' that the batch has no column for",
                writer.id
            )));
        };
        check_nulls(name, column, t, &named, true)?;
    }
    let mut metadata = HashMap::new();
    metadata.insert(SCHEMA_METADATA_KEY.to_string(), writer.schema.clone());
    let schema = Schema::new_with_metadata(batch.schema().fields().clone(), metadata);
    let batch = batch
        .clone()
        .with_schema(Arc::new(schema.clone()))
        .map_err(|e| CoreError::Config(e.to_string()))?;
    let mut encoder = WriterBuilder::new(schema)
        .with_fingerprint_strategy(FingerprintStrategy::Id(writer.id))
        .with_capacity(batch.get_array_memory_size().max(1024))
        .build_encoder::<AvroSoeFormat>()
        .map_err(|e| {
            CoreError::Config(format!(
                "the batch cannot be written with the Avro schema (id {}): {e}",
                writer.id
            ))
        })?;
    encoder
        .encode(&batch)
        .map_err(|e| CoreError::Data(format!("encoding Avro: {e}")))?;
    let rows = encoder.flush();
    let (data, offsets) = (rows.bytes(), rows.offsets());
    for pair in offsets.windows(2) {
        let row = data.get(pair[0]..pair[1]).ok_or_else(|| {
            CoreError::Data("the Avro encoder returned row bounds past its buffer".into())
        })?;
        out.push(row)?;
    }
    Ok(())
}

/// The name of the one field of the record that wraps a scalar key for the encoder: the Avro
/// binary of a record of one field is that field's binary, so the bytes are the key's own.
const KEY_FIELD: &str = "key";

/// Encodes the key column of `batch` with `writer`: rows whose key is null get no key.
fn encode_key_rows(
    batch: &RecordBatch,
    column: &str,
    writer: &AvroWriter,
    out: &mut Payloads,
) -> CoreResult<()> {
    let index = batch
        .schema()
        .index_of(column)
        .map_err(|_| CoreError::Config(format!("key column '{column}' is not in the batch")))?;
    let mut array = batch.column(index).clone();
    if let DataType::Dictionary(_, value) = array.data_type() {
        array = arrow_cast::cast(&array, value)
            .map_err(|e| CoreError::Data(format!("key column '{column}': {e}")))?;
    }
    let present: Option<Vec<bool>> = array
        .nulls()
        .filter(|n| n.null_count() > 0)
        .map(|n| n.iter().collect());
    if let Some(nulls) = array.nulls().filter(|n| n.null_count() > 0) {
        let kept = BooleanArray::new(nulls.inner().clone(), None);
        array = arrow_select::filter::filter(&array, &kept)
            .map_err(|e| CoreError::Data(format!("key column '{column}': {e}")))?;
    }
    let avro: Value = serde_json::from_str(&writer.schema)
        .map_err(|e| CoreError::Config(format!("the key's Avro schema is not JSON: {e}")))?;
    let (keys_batch, record_writer) = match (array.data_type(), avro.get("type")) {
        (DataType::Struct(_), Some(t)) if t == "record" => {
            let strukt = array.as_struct();
            let schema = Schema::new(strukt.fields().clone());
            let batch = RecordBatch::try_new(Arc::new(schema), strukt.columns().to_vec())
                .map_err(|e| CoreError::Data(format!("key column '{column}': {e}")))?;
            (batch, writer.clone())
        }
        _ => {
            let field = Field::new(KEY_FIELD, array.data_type().clone(), false)
                .with_metadata(batch.schema().field(index).metadata().clone());
            let batch = RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![array])
                .map_err(|e| CoreError::Data(format!("key column '{column}': {e}")))?;
            let wrapper = json!({
                "type": "record",
                "name": "LaminarKey",
                "fields": [{ "name": KEY_FIELD, "type": avro }],
            });
            let wrapper = AvroWriter {
                schema: wrapper.to_string(),
                id: writer.id,
            };
            (batch, wrapper)
        }
    };
    let mut encoded = Payloads::with_capacity(keys_batch.get_array_memory_size(), batch.num_rows());
    encode_rows(&keys_batch, &record_writer, &mut encoded)
        .map_err(|e| prefix_error(e, &format!("key column '{column}': ")))?;
    match present {
        None => {
            for key in encoded.iter() {
                out.push(key.unwrap_or_default())?;
            }
        }
        Some(present) => {
            let mut keys = encoded.iter();
            for is_present in present {
                match is_present.then(|| keys.next()).flatten().flatten() {
                    Some(key) => out.push(key)?,
                    None => out.push_null()?,
                }
            }
        }
    }
    Ok(())
}

fn prefix_error(error: CoreError, prefix: &str) -> CoreError {
    match error {
        CoreError::Config(m) => CoreError::Config(format!("{prefix}{m}")),
        CoreError::Data(m) => CoreError::Data(format!("{prefix}{m}")),
        other => other,
    }
}

/// Every row of `batches` as a Kafka record: the value in Avro with `value`'s id, the key as
/// `key` says (none: no key).
pub fn encode_avro(
    schema: &Schema,
    batches: &[RecordBatch],
    value: &AvroWriter,
    key: Option<&AvroKey>,
) -> CoreResult<RecordChunk> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let bytes: usize = batches.iter().map(RecordBatch::get_array_memory_size).sum();
    let mut chunk = RecordChunk {
        values: Payloads::with_capacity(bytes, rows),
        keys: None,
    };
    for batch in batches {
        let batch = decode_dictionaries(batch)?;
        encode_rows(&batch, value, &mut chunk.values)?;
    }
    chunk.keys = match key {
        None => None,
        Some(AvroKey::Plain { column }) => Some(encode_keys(schema, batches, column)?),
        Some(AvroKey::Avro { column, writer }) => {
            let mut keys = Payloads::with_capacity(rows * 16, rows);
            for batch in batches {
                encode_key_rows(batch, column, writer, &mut keys)?;
            }
            Some(keys)
        }
    };
    Ok(chunk)
}

#[cfg(test)]
#[path = "avro_tests.rs"]
mod tests;
