//! Spark's Kafka-sink shape (docs/kafka.md, "Spark's Kafka-sink shape"): the columns `key` and
//! `value` (string or binary, written as is) and the optional per-row `topic` (string),
//! `partition` (integer) and `headers` (`array<struct<key: string, value: binary>>`).
//!
//! The payloads go through [`super::kafka::KafkaEncoder`] like a raw value column; this module
//! plans the other columns and reads them into a [`Routing`]: each row's topic (interned: a
//! batch names few topics), explicit partition and user headers, every value checked here so
//! that a bad row is a `DataError` naming it before anything is produced.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, GenericListArray, OffsetSizeTrait, RecordBatch, StructArray};
use arrow_schema::{DataType, Field, Schema};

use super::bytes::{ByteColumn, is_byte_type};
use crate::error::{CoreError, CoreResult};

/// The shape's column names.
pub const KEY: &str = "key";
/// The value column (required).
pub const VALUE: &str = "value";
/// The per-row topic.
pub const TOPIC: &str = "topic";
/// The per-row explicit partition.
pub const PARTITION: &str = "partition";
/// The per-row user headers.
pub const HEADERS: &str = "headers";
/// Header keys that start with this are Laminar's own (`laminar.sink`, `laminar.epoch`).
pub const RESERVED_HEADER_PREFIX: &str = "laminar.";

/// Where the optional columns are (indices into the schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RoutePlan {
    topic: Option<usize>,
    partition: Option<usize>,
    headers: Option<usize>,
}

impl RoutePlan {
    /// Whether rows carry an explicit partition.
    pub fn has_partition(&self) -> bool {
        self.partition.is_some()
    }

    /// Whether rows carry user headers.
    pub fn has_headers(&self) -> bool {
        self.headers.is_some()
    }
}

/// One user header: its key and value (`None`: a null value).
pub type Header = (String, Option<Vec<u8>>);

/// Each row's topic, partition and user headers (rows in encoding order).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Routing {
    /// The distinct topics, in the order rows first name them.
    pub topics: Vec<String>,
    /// Per row: its topic's index in `topics`.
    pub topic_of_row: Vec<u32>,
    /// Per topic (as `topics`): the highest explicit partition of its rows, -1 if none.
    pub max_partition: Vec<i32>,
    /// Per row: the explicit partition, -1 (the partitioner's choice) when null; `None` without
    /// a `partition` column.
    pub partitions: Option<Vec<i32>>,
    /// Per row: the user headers (empty when null); `None` without a `headers` column.
    pub headers: Option<Vec<Vec<Header>>>,
}

fn is_string_type(dt: &DataType) -> bool {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(k, v) => k.is_dictionary_key_type() && is_string_type(v),
        _ => false,
    }
}

fn is_partition_type(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
    )
}

fn header_struct(dt: &DataType) -> Option<&Field> {
    match dt {
        DataType::List(f) | DataType::LargeList(f) => Some(f.as_ref()),
        _ => None,
    }
}

/// Whether `dt` is `array<struct<key: string, value: binary>>` (a list or large list).
fn is_headers_type(dt: &DataType) -> bool {
    let Some(DataType::Struct(fields)) = header_struct(dt).map(Field::data_type) else {
        return false;
    };
    let key = fields.iter().find(|f| f.name() == KEY);
    let value = fields.iter().find(|f| f.name() == VALUE);
    fields.len() == 2
        && key.is_some_and(|k| is_string_type(k.data_type()))
        && value.is_some_and(|v| is_byte_type(v.data_type()))
}

/// What a column named like one of the shape's needs when its type is not that (`None`: it
/// fits, or the name is not one of the shape's).
fn wrong_type(field: &Field) -> Option<&'static str> {
    let dt = field.data_type();
    match field.name().as_str() {
        VALUE | KEY if !is_byte_type(dt) => Some("string or binary"),
        TOPIC if !is_string_type(dt) => Some("string"),
        PARTITION if !is_partition_type(dt) => Some("an integer"),
        HEADERS if !is_headers_type(dt) => Some("array<struct<key: string, value: binary>>"),
        _ => None,
    }
}

/// Whether every column of `schema` has one of the shape's names and `value` is among them,
/// whatever their types.
fn has_shape_names(schema: &Schema) -> bool {
    let names = [KEY, VALUE, TOPIC, PARTITION, HEADERS];
    schema.index_of(VALUE).is_ok()
        && schema
            .fields()
            .iter()
            .all(|f| names.contains(&f.name().as_str()))
}

/// Whether `schema` is exactly Spark's Kafka-sink shape: a byte-typed `value`, and otherwise
/// only `key` (bytes), `topic` (string), `partition` (integer) and `headers` of their types.
/// What a sink with no value option given writes as that shape.
pub fn is_spark_shape(schema: &Schema) -> bool {
    has_shape_names(schema) && schema.fields().iter().all(|f| wrong_type(f).is_none())
}

/// The shape detection of a sink with no value option given (docs/kafka.md, "Which
/// batches"): `true` for exactly the shape ([`is_spark_shape`]), `false` when a column is not
/// one of the shape's names (or there is no `value`: the batch is written as JSON). A batch
/// whose columns all have the shape's names but one of them not its type — `partition` as a
/// string, say — is a `DataError` naming the column and the type it needs: Spark's own Kafka
/// sink refuses it too, and writing it as JSON to the sink's topic instead would change both
/// the format and the destination without a word.
pub fn detect_spark_shape(schema: &Schema) -> CoreResult<bool> {
    if !has_shape_names(schema) {
        return Ok(false);
    }
    match schema
        .fields()
        .iter()
        .find_map(|f| wrong_type(f).map(|want| (f, want)))
    {
        None => Ok(true),
        Some((field, want)) => Err(CoreError::Data(format!(
            "the batch has the columns of Spark's Kafka-sink shape (key, value, topic, \
             partition, headers) but column '{}' has Arrow type {}, where the shape needs \
             {want} (Spark's own Kafka sink refuses it too): cast the column, or set \
             value_format=\"json\" (format('laminar'): option kafka.value.format=json) to write \
             each row as a JSON object to the sink's topic",
            field.name(),
            field.data_type()
        ))),
    }
}

/// Plans the shape over `schema`: `(value index, key index, optional columns)`. Other columns
/// are left out, as Spark's Kafka sink does; a column of the shape with the wrong type is a
/// `ConfigError` naming it.
pub fn plan_spark(schema: &Schema) -> CoreResult<(usize, Option<usize>, RoutePlan)> {
    let find = |name: &str| schema.index_of(name).ok();
    let names = || -> Vec<&str> { schema.fields().iter().map(|f| f.name().as_str()).collect() };
    let value = find(VALUE).ok_or_else(|| {
        CoreError::Config(format!(
            "value_format=\"spark\" needs a 'value' column (string or binary), as Spark's Kafka \
             sink does; the batch has {:?}",
            names()
        ))
    })?;
    let typed = |idx: usize| -> CoreResult<usize> {
        let field = schema.field(idx);
        match wrong_type(field) {
            None => Ok(idx),
            Some(want) => Err(CoreError::Config(format!(
                "column '{}' has Arrow type {}; Spark's Kafka shape needs {want}",
                field.name(),
                field.data_type()
            ))),
        }
    };
    typed(value)?;
    let key = find(KEY).map(typed).transpose()?;
    let topic = find(TOPIC).map(typed).transpose()?;
    let partition = find(PARTITION).map(typed).transpose()?;
    let headers = find(HEADERS).map(typed).transpose()?;
    Ok((
        value,
        key,
        RoutePlan {
            topic,
            partition,
            headers,
        },
    ))
}

/// The topics Kafka keeps its own state in: `Topic.isInternal` of Apache Kafka's clients
/// (consumer offsets, transactions, share groups) and the KRaft metadata log. No client may
/// produce to them; the brokers refuse it with an error that names neither the row nor the topic.
pub const INTERNAL_TOPICS: [&str; 4] = [
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
    "__cluster_metadata",
];

/// Whether `name` is one of Kafka's [`INTERNAL_TOPICS`].
pub fn is_internal_topic(name: &[u8]) -> bool {
    INTERNAL_TOPICS.iter().any(|t| t.as_bytes() == name)
}

/// Kafka's topic name rule: 1-249 characters of `a-z A-Z 0-9 . _ -`, not `.` or `..`.
pub fn is_valid_topic(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != b"."
        && name != b".."
        && name
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// Reads the routing of every row of `batches` (planned by [`plan_spark`] on their schema).
/// `default_topic` is the topic of rows whose `topic` is null (the sink's `topic=`); `first_row`
/// numbers the rows in errors. A bad row is a `DataError` naming it and what to fix.
pub fn route(
    plan: &RoutePlan,
    batches: &[RecordBatch],
    default_topic: Option<&str>,
    first_row: usize,
) -> CoreResult<Routing> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut out = Routing {
        topic_of_row: Vec::with_capacity(rows),
        partitions: plan.partition.map(|_| Vec::with_capacity(rows)),
        headers: plan.headers.map(|_| Vec::with_capacity(rows)),
        ..Routing::default()
    };
    let mut ids: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut row = first_row;
    for batch in batches {
        let topics = match plan.topic {
            Some(i) => Some(ByteColumn::try_new(TOPIC, batch.column(i))?),
            None => None,
        };
        let partitions = match plan.partition {
            // not `cast`: its safe mode turns a value Int64 cannot hold (a UInt64 >= 2^63) into
            // null, which would let the partitioner choose instead of refusing the row
            Some(i) => Some(
                arrow_cast::cast_with_options(
                    batch.column(i),
                    &DataType::Int64,
                    &arrow_cast::CastOptions {
                        safe: false,
                        ..Default::default()
                    },
                )
                .map_err(|e| {
                    CoreError::Data(format!(
                        "column '{PARTITION}': {e}; a partition is an integer from 0 to the \
                         topic's partition count - 1 (or null: the partitioner chooses)"
                    ))
                })?,
            ),
            None => None,
        };
        let partitions = partitions
            .as_ref()
            .map(|a| a.as_primitive::<arrow_array::types::Int64Type>());
        let headers = match plan.headers {
            Some(i) => Some(HeaderColumn::try_new(batch.column(i))?),
            None => None,
        };
        let mut last: Option<u32> = None; // the previous row's topic
        for i in 0..batch.num_rows() {
            let name: &[u8] = match &topics {
                Some(col) if !col.is_null(i) => col.value(i),
                _ => match default_topic {
                    Some(t) => t.as_bytes(),
                    None => {
                        return Err(CoreError::Data(format!(
                            "row {row} has no topic (its 'topic' is null) and the sink has no \
                             default topic: give the row a topic or set the sink's topic="
                        )));
                    }
                },
            };
            let id = match last {
                Some(id)
                    if out
                        .topics
                        .get(id as usize)
                        .is_some_and(|t| t.as_bytes() == name) =>
                {
                    id
                }
                _ => match ids.get(name) {
                    Some(&id) => id,
                    None => {
                        if !is_valid_topic(name) {
                            return Err(CoreError::Data(format!(
                                "row {row} names topic {:?}, which is not a valid Kafka topic \
                                 name (1-249 characters of a-z A-Z 0-9 . _ -, and not '.' or \
                                 '..')",
                                String::from_utf8_lossy(name)
                            )));
                        }
                        if is_internal_topic(name) {
                            return Err(CoreError::Data(format!(
                                "row {row} names topic {:?}, one of Kafka's internal topics \
                                 (the brokers' own state), which no client may write: fix the \
                                 row's 'topic'",
                                String::from_utf8_lossy(name)
                            )));
                        }
                        let id = u32::try_from(out.topics.len()).map_err(|_| {
                            CoreError::Data("a batch names more than 2^32 topics".into())
                        })?;
                        // Valid topic names are ASCII, so this is lossless.
                        out.topics.push(String::from_utf8_lossy(name).into_owned());
                        out.max_partition.push(-1);
                        ids.insert(name.to_vec(), id);
                        id
                    }
                },
            };
            last = Some(id);
            out.topic_of_row.push(id);
            if let (Some(col), Some(list)) = (partitions, out.partitions.as_mut()) {
                let partition = if col.is_null(i) {
                    -1
                } else {
                    let p = col.value(i);
                    i32::try_from(p).ok().filter(|p| *p >= 0).ok_or_else(|| {
                        CoreError::Data(format!(
                            "row {row} has partition {p} for topic '{}': a partition is an \
                             integer from 0 to the topic's partition count - 1 (or null: the \
                             partitioner chooses)",
                            String::from_utf8_lossy(name)
                        ))
                    })?
                };
                if let Some(max) = out.max_partition.get_mut(id as usize) {
                    *max = (*max).max(partition);
                }
                list.push(partition);
            }
            if let (Some(col), Some(list)) = (&headers, out.headers.as_mut()) {
                list.push(col.row(i, row)?);
            }
            row += 1;
        }
    }
    Ok(out)
}

/// The `headers` column: a list of `struct<key, value>` per row.
struct HeaderColumn {
    offsets: Vec<usize>,
    list: ArrayRef,
    /// The header structs themselves (an element may be null).
    items: ArrayRef,
    keys: ByteColumn,
    values: ByteColumn,
}

impl HeaderColumn {
    fn try_new(array: &ArrayRef) -> CoreResult<Self> {
        let malformed = || {
            CoreError::Config(format!(
                "column '{HEADERS}': Arrow type {} does not match its data",
                array.data_type()
            ))
        };
        let (offsets, items) = match array.data_type() {
            DataType::List(_) => list_parts::<i32>(array.as_list_opt().ok_or_else(malformed)?),
            DataType::LargeList(_) => list_parts::<i64>(array.as_list_opt().ok_or_else(malformed)?),
            _ => return Err(malformed()),
        };
        let structs: &StructArray = items.as_struct_opt().ok_or_else(malformed)?;
        let keys = structs.column_by_name(KEY).ok_or_else(malformed)?;
        let values = structs.column_by_name(VALUE).ok_or_else(malformed)?;
        Ok(Self {
            items: items.clone(),
            keys: ByteColumn::try_new("headers.key", keys)?,
            values: ByteColumn::try_new("headers.value", values)?,
            offsets,
            list: array.clone(),
        })
    }

    fn row(&self, i: usize, row: usize) -> CoreResult<Vec<Header>> {
        if self.list.is_null(i) {
            return Ok(Vec::new());
        }
        let (start, end) = match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&s), Some(&e)) => (s, e),
            _ => return Err(CoreError::Data(format!("row {row}: malformed headers"))),
        };
        let mut out = Vec::with_capacity(end.saturating_sub(start));
        for j in start..end {
            if self.items.is_null(j) {
                return Err(CoreError::Data(format!(
                    "row {row} has a null header (an element of '{HEADERS}' is null); drop it, \
                     or give it a key"
                )));
            }
            if self.keys.is_null(j) {
                return Err(CoreError::Data(format!(
                    "row {row} has a header with a null key; every header needs a key"
                )));
            }
            let key = String::from_utf8_lossy(self.keys.value(j)).into_owned();
            if key.starts_with(RESERVED_HEADER_PREFIX) {
                return Err(CoreError::Data(format!(
                    "row {row} has the header '{key}': header keys starting with \
                     '{RESERVED_HEADER_PREFIX}' are reserved for Laminar's own headers \
                     (laminar.sink, laminar.epoch); rename it"
                )));
            }
            let value = (!self.values.is_null(j)).then(|| self.values.value(j).to_vec());
            out.push((key, value));
        }
        Ok(out)
    }
}

fn list_parts<O: OffsetSizeTrait>(list: &GenericListArray<O>) -> (Vec<usize>, ArrayRef) {
    let offsets = list.value_offsets().iter().map(|o| o.as_usize()).collect();
    (offsets, list.values().clone())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{BinaryBuilder, ListBuilder, StringBuilder, StructBuilder};
    use arrow_array::{BinaryArray, Int32Array, StringArray};
    use arrow_schema::Fields;

    use super::*;

    type TestHeaders<'a> = Option<Vec<(&'a str, Option<&'a [u8]>)>>;
    /// A header that may itself be null.
    type TestElement<'a> = Option<(&'a str, Option<&'a [u8]>)>;

    fn headers_column(rows: &[TestHeaders<'_>]) -> ArrayRef {
        let rows: Vec<_> = rows
            .iter()
            .map(|r| r.as_ref().map(|h| h.iter().copied().map(Some).collect()))
            .collect();
        headers_column_with_null_elements(&rows)
    }

    /// As `headers_column`, where an element itself may be null (`None` inside the list).
    fn headers_column_with_null_elements(rows: &[Option<Vec<TestElement<'_>>>]) -> ArrayRef {
        let fields = Fields::from(vec![
            Field::new(KEY, DataType::Utf8, true),
            Field::new(VALUE, DataType::Binary, true),
        ]);
        let inner = StructBuilder::new(
            fields,
            vec![
                Box::new(StringBuilder::new()),
                Box::new(BinaryBuilder::new()),
            ],
        );
        let mut list = ListBuilder::new(inner);
        for r in rows {
            match r {
                None => list.append(false),
                Some(headers) => {
                    for header in headers {
                        let s = list.values();
                        let (k, v) = header.unwrap_or_default();
                        let keys = s.field_builder::<StringBuilder>(0).expect("key");
                        match header {
                            Some(_) => keys.append_value(k),
                            None => keys.append_null(),
                        }
                        let values = s.field_builder::<BinaryBuilder>(1).expect("value");
                        match v {
                            Some(v) => values.append_value(v),
                            None => values.append_null(),
                        }
                        s.append(header.is_some());
                    }
                    list.append(true);
                }
            }
        }
        Arc::new(list.finish())
    }

    fn batch(
        topics: Vec<Option<&str>>,
        partitions: Vec<Option<i32>>,
        headers: ArrayRef,
    ) -> RecordBatch {
        let n = topics.len();
        let values: Vec<&[u8]> = vec![b"v"; n];
        RecordBatch::try_from_iter(vec![
            (
                KEY,
                Arc::new(StringArray::from(vec![Some("k"); n])) as ArrayRef,
            ),
            (VALUE, Arc::new(BinaryArray::from(values)) as ArrayRef),
            (TOPIC, Arc::new(StringArray::from(topics)) as ArrayRef),
            (
                PARTITION,
                Arc::new(Int32Array::from(partitions)) as ArrayRef,
            ),
            (HEADERS, headers),
        ])
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn routes_topics_partitions_headers() {
        let h = headers_column(&[
            Some(vec![("a", Some(b"1")), ("b", None)]),
            None,
            Some(vec![]),
        ]);
        let b = batch(
            vec![Some("t1"), None, Some("t2")],
            vec![Some(2), None, Some(0)],
            h,
        );
        assert!(is_spark_shape(&b.schema()));
        let (value, key, plan) = plan_spark(&b.schema()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((value, key), (1, Some(0)));
        let r = route(&plan, &[b], Some("home"), 0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.topics, vec!["t1", "home", "t2"]);
        assert_eq!(r.topic_of_row, vec![0, 1, 2]);
        assert_eq!(r.max_partition, vec![2, -1, 0]);
        assert_eq!(r.partitions, Some(vec![2, -1, 0]));
        let headers = r.headers.unwrap_or_default();
        assert_eq!(
            headers[0],
            vec![
                ("a".to_string(), Some(b"1".to_vec())),
                ("b".to_string(), None)
            ]
        );
        assert!(headers[1].is_empty() && headers[2].is_empty());
    }

    #[test]
    fn bad_rows_are_data_errors_naming_the_row() {
        let ok = || headers_column(&[None, None]);
        let cases = [
            (
                batch(vec![Some("t"), None], vec![None, None], ok()),
                None,
                "row 11 has no topic",
            ),
            (
                batch(vec![Some("t"), Some("bad topic")], vec![None, None], ok()),
                Some("home"),
                "row 11 names topic \"bad topic\"",
            ),
            (
                batch(vec![Some("t"), Some("t")], vec![None, Some(-3)], ok()),
                Some("home"),
                "row 11 has partition -3 for topic 't'",
            ),
            (
                batch(
                    vec![None, None],
                    vec![None, None],
                    headers_column(&[None, Some(vec![("laminar.epoch", Some(b"9"))])]),
                ),
                Some("home"),
                "row 11 has the header 'laminar.epoch'",
            ),
        ];
        for (b, default, want) in cases {
            let (_, _, plan) = plan_spark(&b.schema()).unwrap_or_else(|e| panic!("{e}"));
            match route(&plan, &[b], default, 10) {
                Err(CoreError::Data(msg)) => assert!(msg.contains(want), "{msg}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_null_header_element_is_a_data_error_not_an_empty_header() {
        let h = headers_column_with_null_elements(&[Some(vec![None, Some(("a", Some(b"1")))])]);
        let b = batch(vec![Some("t")], vec![None], h);
        let (_, _, plan) = plan_spark(&b.schema()).unwrap_or_else(|e| panic!("{e}"));
        match route(&plan, &[b], Some("home"), 4) {
            Err(CoreError::Data(msg)) => assert!(msg.contains("row 4 has a null header"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_partition_past_int64_is_a_data_error_not_the_partitioners_choice() {
        let b = RecordBatch::try_from_iter(vec![
            (
                VALUE,
                Arc::new(BinaryArray::from(vec![b"v".as_slice()])) as ArrayRef,
            ),
            (
                PARTITION,
                Arc::new(arrow_array::UInt64Array::from(vec![1u64 << 63])) as ArrayRef,
            ),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let (_, _, plan) = plan_spark(&b.schema()).unwrap_or_else(|e| panic!("{e}"));
        match route(&plan, &[b], Some("home"), 0) {
            Err(CoreError::Data(msg)) => assert!(msg.contains("column 'partition'"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn internal_topics_are_data_errors_naming_the_row() {
        for internal in INTERNAL_TOPICS {
            let b = batch(
                vec![Some("t"), Some(internal)],
                vec![None, None],
                headers_column(&[None, None]),
            );
            let (_, _, plan) = plan_spark(&b.schema()).unwrap_or_else(|e| panic!("{e}"));
            match route(&plan, &[b], Some("home"), 3) {
                Err(CoreError::Data(msg)) => {
                    assert!(
                        msg.contains(&format!("row 4 names topic \"{internal}\"")),
                        "{msg}"
                    );
                    assert!(msg.contains("internal"), "{msg}");
                }
                other => panic!("{other:?}"),
            }
        }
        // a name that only looks like one is a topic like any other
        assert!(!is_internal_topic(b"__consumer_offsets2"));
        assert!(!is_internal_topic(b"_consumer_offsets"));
    }

    #[test]
    fn shape_names_with_a_wrong_type_are_a_data_error_naming_the_column() {
        let s = |fields: Vec<Field>| Schema::new(fields);
        let value = Field::new(VALUE, DataType::Utf8, true);
        let cases = [
            (
                Field::new(PARTITION, DataType::Utf8, true),
                "'partition'",
                "an integer",
            ),
            (
                Field::new(TOPIC, DataType::Int32, true),
                "'topic'",
                "string",
            ),
            (
                Field::new(KEY, DataType::Int64, true),
                "'key'",
                "string or binary",
            ),
            (
                Field::new(HEADERS, DataType::Utf8, true),
                "'headers'",
                "array<struct<key: string, value: binary>>",
            ),
        ];
        for (field, column, want) in cases {
            let schema = s(vec![value.clone(), field]);
            assert!(!is_spark_shape(&schema));
            match detect_spark_shape(&schema) {
                Err(CoreError::Data(msg)) => {
                    assert!(msg.contains(&format!("column {column}")), "{msg}");
                    assert!(msg.contains(&format!("needs {want}")), "{msg}");
                    assert!(msg.contains("kafka.value.format=json"), "{msg}");
                }
                other => panic!("{other:?}"),
            }
        }
        let wrong_value = s(vec![Field::new(VALUE, DataType::Int64, true)]);
        assert!(matches!(
            detect_spark_shape(&wrong_value),
            Err(CoreError::Data(_))
        ));
        // exactly the shape, or not the shape's names: no error
        assert_eq!(detect_spark_shape(&s(vec![value.clone()])).ok(), Some(true));
        let other = s(vec![value, Field::new("id", DataType::Int64, true)]);
        assert_eq!(detect_spark_shape(&other).ok(), Some(false));
        let no_value = s(vec![Field::new(PARTITION, DataType::Utf8, true)]);
        assert_eq!(detect_spark_shape(&no_value).ok(), Some(false));
    }

    #[test]
    fn shape_detection() {
        let s = |fields: Vec<Field>| Schema::new(fields);
        let value = Field::new(VALUE, DataType::Utf8, true);
        assert!(is_spark_shape(&s(vec![value.clone()])));
        assert!(is_spark_shape(&s(vec![
            Field::new(KEY, DataType::Binary, true),
            value.clone()
        ])));
        assert!(!is_spark_shape(&s(vec![Field::new(
            KEY,
            DataType::Utf8,
            true
        )])));
        assert!(!is_spark_shape(&s(vec![
            value.clone(),
            Field::new("id", DataType::Int64, true)
        ])));
        assert!(!is_spark_shape(&s(vec![Field::new(
            VALUE,
            DataType::Int64,
            true
        )])));
        assert!(!is_spark_shape(&s(vec![
            value,
            Field::new(TOPIC, DataType::Int64, true)
        ])));
    }
}
