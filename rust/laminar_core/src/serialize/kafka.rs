//! Arrow rows → Kafka `(key, value)` payloads.
//!
//! The payloads of a batch are written into a few large buffers ("chunks", about 1 MiB each) plus
//! per-row end offsets, so encoding allocates per chunk, not per record. The binding turns each
//! chunk into Python `bytes` objects and frees it before the next, which keeps the peak extra memory
//! close to the output size.

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::Schema;

use super::bytes::{ByteColumn, is_byte_type};
use super::json::{JsonColumn, JsonRowEncoder, check_json_schema, check_json_type};
use super::kafka_shape::{self, RoutePlan};
use crate::error::{CoreError, CoreResult};

/// How record values are produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueFormat {
    /// One JSON object per row, fields in column order.
    Json,
    /// The bytes of one string/binary column, as is.
    Raw,
    /// Spark's Kafka-sink shape: `value` (and optional `key`) as is, per-row `topic`,
    /// `partition` and `headers` ([`super::kafka_shape`]).
    Spark,
}

impl ValueFormat {
    /// Parses the user-facing name (`"json"` or `"raw"`).
    pub fn parse(name: &str) -> CoreResult<Self> {
        match name {
            "json" => Ok(Self::Json),
            "raw" => Ok(Self::Raw),
            "spark" => Ok(Self::Spark),
            other => Err(CoreError::Config(format!(
                "value_format {other:?} is not supported; use \"json\", \"raw\" or \"spark\""
            ))),
        }
    }
}

/// What the user asked for: value format, optional value column (raw) and optional key column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaOptions {
    /// How values are produced.
    pub value_format: ValueFormat,
    /// The column whose bytes are the value (`Raw` only; default: the only column).
    pub value_column: Option<String>,
    /// The column whose value becomes the record key (default: no key).
    pub key_column: Option<String>,
}

/// Options resolved against a schema: the validated plan that encoding follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaPlan {
    value: ValuePlan,
    key: Option<(usize, KeyKind)>,
    route: Option<RoutePlan>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValuePlan {
    Json,
    Raw(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    /// Strings as UTF-8, binary as is.
    Bytes,
    /// The value's JSON text (integers are their decimal text).
    Json,
}

fn column_index(schema: &Schema, name: &str, role: &str) -> CoreResult<usize> {
    schema.index_of(name).map_err(|_| {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        CoreError::Config(format!(
            "{role} column '{name}' is not in the batch (columns: {names:?})"
        ))
    })
}

impl KafkaPlan {
    /// Whether records get a key.
    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// The per-row topic/partition/headers columns of Spark's shape, when that is the format.
    pub fn route(&self) -> Option<&RoutePlan> {
        self.route.as_ref()
    }
}

/// Validates `options` against `schema` before anything is produced: the key and value columns
/// exist and every type can be encoded. Errors name the column and its type.
pub fn plan_kafka(schema: &Schema, options: &KafkaOptions) -> CoreResult<KafkaPlan> {
    let value = match options.value_format {
        ValueFormat::Spark => return plan_spark(schema, options),
        ValueFormat::Json => {
            if options.value_column.is_some() {
                return Err(CoreError::Config(
                    "value_column applies to value_format=\"raw\" only; with \"json\" every \
                     column is written"
                        .into(),
                ));
            }
            check_json_schema(schema)?;
            ValuePlan::Json
        }
        ValueFormat::Raw => {
            let idx = match &options.value_column {
                Some(name) => column_index(schema, name, "value")?,
                None if schema.fields().len() == 1 => 0,
                None => {
                    return Err(CoreError::Config(format!(
                        "value_format=\"raw\" needs value_column when the batch has {} columns",
                        schema.fields().len()
                    )));
                }
            };
            let field = schema.field(idx);
            if !is_byte_type(field.data_type()) {
                return Err(CoreError::Config(format!(
                    "value_format=\"raw\" needs a string or binary column; column '{}' has \
                     Arrow type {}; cast it to binary or use value_format=\"json\"",
                    field.name(),
                    field.data_type()
                )));
            }
            ValuePlan::Raw(idx)
        }
    };
    let key = match &options.key_column {
        None => None,
        Some(name) => Some(plan_key(schema, name)?),
    };
    Ok(KafkaPlan {
        value,
        key,
        route: None,
    })
}

/// The key column's index and how its values become key bytes.
fn plan_key(schema: &Schema, name: &str) -> CoreResult<(usize, KeyKind)> {
    let idx = column_index(schema, name, "key")?;
    let field = schema.field(idx);
    let kind = if is_byte_type(field.data_type()) {
        KeyKind::Bytes
    } else {
        check_json_type(field.name(), field.data_type())?;
        KeyKind::Json
    };
    Ok((idx, kind))
}

/// The keys alone of `batches`, by the rules of a key column (docs/serialization.md, "Kafka
/// keys"): what a value encoded elsewhere (Avro, `super::avro`) pairs with a key that is not Avro.
pub fn encode_keys(
    schema: &Schema,
    batches: &[RecordBatch],
    key_column: &str,
) -> CoreResult<Payloads> {
    let (idx, kind) = plan_key(schema, key_column)?;
    let rows = batches.iter().map(RecordBatch::num_rows).sum();
    let mut keys = Payloads::with_capacity(rows * 16, rows);
    for batch in batches {
        let writer = key_writer(kind, &schema.field(idx).name().clone(), batch.column(idx))?;
        for row in 0..batch.num_rows() {
            write_key(&writer, row, &mut keys)?;
        }
    }
    Ok(keys)
}

fn key_writer(kind: KeyKind, name: &str, column: &ArrayRef) -> CoreResult<KeyWriter> {
    Ok(match kind {
        KeyKind::Bytes => KeyWriter::Bytes(ByteColumn::try_new(name, column)?),
        KeyKind::Json => KeyWriter::Json(JsonColumn::try_new(name, column)?),
    })
}

fn plan_spark(schema: &Schema, options: &KafkaOptions) -> CoreResult<KafkaPlan> {
    if options.value_column.is_some() || options.key_column.is_some() {
        return Err(CoreError::Config(
            "value_format=\"spark\" reads the columns 'key' and 'value' by name; key and \
             value_column are not used with it"
                .into(),
        ));
    }
    let (value, key, route) = kafka_shape::plan_spark(schema)?;
    Ok(KafkaPlan {
        value: ValuePlan::Raw(value),
        key: key.map(|k| (k, KeyKind::Bytes)),
        route: Some(route),
    })
}

/// The payloads of some rows: bytes back to back, per-row end offsets and per-row validity.
///
/// The fields are private so that the one invariant cannot be broken from outside: once any row
/// is null, `valid` holds exactly one flag per row (`valid.len() == ends.len()`); before that it
/// is `None` and every row is present. (An earlier "empty means all present" encoding could not
/// tell "no null yet" from "materialised with zero rows", so a null first row read back as `b""`.)
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Payloads {
    /// All payloads back to back.
    data: Vec<u8>,
    /// End offset of each row's payload in `data` (row `i` is `ends[i-1]..ends[i]`).
    ends: Vec<u32>,
    /// Per row: `false` when the payload is null (`None` in Python); `None`: no row is null.
    valid: Option<Vec<bool>>,
}

impl Payloads {
    pub(crate) fn with_capacity(bytes: usize, rows: usize) -> Self {
        Self {
            data: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(rows),
            valid: None,
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Bytes of all payloads.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// Number of null rows.
    pub fn null_count(&self) -> usize {
        self.valid
            .as_ref()
            .map_or(0, |v| v.iter().filter(|&&present| !present).count())
    }

    /// Empties the payloads, keeping the buffers' capacity.
    pub fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
        self.valid = None;
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Row `i`'s payload, `None` when null (or when there is no row `i`).
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        if let Some(valid) = &self.valid {
            if !valid.get(i).copied().unwrap_or(false) {
                return None;
            }
        }
        let end = *self.ends.get(i)? as usize;
        let start = match i.checked_sub(1) {
            Some(previous) => *self.ends.get(previous)? as usize,
            None => 0,
        };
        self.data.get(start..end)
    }

    /// Every row's payload in order (`None` when null): one pass over the offsets, without the
    /// per-row lookups of [`Self::get`] (what the bindings use to build one `bytes` per row).
    pub fn iter(&self) -> impl Iterator<Item = Option<&[u8]>> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        self.ends
            .iter()
            .zip(starts)
            .enumerate()
            .map(move |(i, (&end, start))| {
                let present = self
                    .valid
                    .as_ref()
                    .is_none_or(|v| v.get(i).copied().unwrap_or(false));
                if present {
                    self.data.get(start as usize..end as usize)
                } else {
                    None
                }
            })
    }

    /// Appends a row whose payload is `bytes`.
    #[inline]
    pub fn push(&mut self, bytes: &[u8]) -> CoreResult<()> {
        self.data.extend_from_slice(bytes);
        self.finish_row()
    }

    /// Appends a row whose payload is written by `write` (into the shared buffer).
    #[inline]
    fn push_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> CoreResult<()> {
        write(&mut self.data);
        self.finish_row()
    }

    #[inline]
    fn finish_row(&mut self) -> CoreResult<()> {
        let end = u32::try_from(self.data.len()).map_err(|_| {
            CoreError::Data("a single Kafka payload exceeds 4 GiB; split the row".into())
        })?;
        self.ends.push(end);
        if let Some(valid) = self.valid.as_mut() {
            valid.push(true);
        }
        Ok(())
    }

    /// Appends a null row (`None` in Python: no key, or a tombstone value).
    #[inline]
    pub fn push_null(&mut self) -> CoreResult<()> {
        let rows = self.ends.len();
        let valid = self.valid.get_or_insert_with(|| vec![true; rows]);
        valid.push(false);
        let end = self.ends.last().copied().unwrap_or(0);
        self.ends.push(end);
        debug_assert_eq!(
            self.valid.as_ref().map_or(rows + 1, Vec::len),
            self.ends.len()
        );
        Ok(())
    }
}

/// One chunk of encoded records (about [`CHUNK_BYTES`] of values).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecordChunk {
    /// The values of the chunk's rows.
    pub values: Payloads,
    /// The keys of the chunk's rows, when a key column was given.
    pub keys: Option<Payloads>,
}

impl RecordChunk {
    /// Empties the chunk, keeping its buffers' capacity.
    pub fn clear(&mut self) {
        self.values.clear();
        if let Some(keys) = self.keys.as_mut() {
            keys.clear();
        }
    }
}

/// All payloads of a batch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KafkaRecords {
    /// The chunks, in row order.
    pub chunks: Vec<RecordChunk>,
    /// Number of records.
    pub num_rows: usize,
    /// Bytes of all values.
    pub value_bytes: usize,
    /// Bytes of all keys.
    pub key_bytes: usize,
}

/// One record's `(key, value)`; `None` = null / no key.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Target size of a chunk's value buffer.
pub const CHUNK_BYTES: usize = 1 << 20;

enum ValueWriter {
    Json(JsonRowEncoder),
    Raw(ByteColumn),
}

enum KeyWriter {
    Bytes(ByteColumn),
    Json(JsonColumn),
}

/// Encodes the rows of `batches` one chunk at a time into a caller-owned, reused [`RecordChunk`]:
/// the buffer stays hot in cache and its pages are touched once, not once per chunk.
pub struct KafkaEncoder {
    plan: KafkaPlan,
    batches: Vec<RecordBatch>,
    batch: usize,
    row: usize,
    writers: Option<(ValueWriter, Option<KeyWriter>)>,
    chunk_bytes: usize,
}

impl KafkaEncoder {
    /// Starts at the first row of `batches` (encoded following `plan`, from [`plan_kafka`]).
    /// The batches share their buffers with the caller's (no copy).
    pub fn new(plan: KafkaPlan, batches: Vec<RecordBatch>) -> Self {
        Self {
            plan,
            batches,
            batch: 0,
            row: 0,
            writers: None,
            chunk_bytes: CHUNK_BYTES,
        }
    }

    /// Ends each chunk once its values reach `bytes` (default [`CHUNK_BYTES`]; at least one row
    /// per chunk). Small values let tests put chunk boundaries anywhere.
    pub fn with_chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes.max(1);
        self
    }

    /// Rows in all batches.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    /// An empty chunk with buffers sized for this plan.
    pub fn new_chunk(&self) -> RecordChunk {
        let rows: usize = self.batches.iter().map(RecordBatch::num_rows).sum();
        new_chunk(&self.plan, rows)
    }

    fn writers_for(
        plan: &KafkaPlan,
        batch: &RecordBatch,
    ) -> CoreResult<(ValueWriter, Option<KeyWriter>)> {
        let schema = batch.schema();
        let name = |i: usize| schema.field(i).name().clone();
        let value = match plan.value {
            ValuePlan::Json => ValueWriter::Json(JsonRowEncoder::try_new(batch)?),
            ValuePlan::Raw(i) => ValueWriter::Raw(ByteColumn::try_new(&name(i), batch.column(i))?),
        };
        let key = match plan.key {
            None => None,
            Some((i, kind)) => Some(key_writer(kind, &name(i), batch.column(i))?),
        };
        Ok((value, key))
    }

    /// Whether every row has been encoded (the next [`Self::next_chunk`] returns `false`).
    pub fn is_done(&self) -> bool {
        let mut rest = self.batches.iter().skip(self.batch);
        match rest.next() {
            None => true,
            Some(current) => self.row >= current.num_rows() && rest.all(|b| b.num_rows() == 0),
        }
    }

    /// Clears `chunk` and fills it with the next rows, up to about [`CHUNK_BYTES`] of values
    /// (see [`Self::with_chunk_bytes`]).
    /// Returns `false` (and leaves `chunk` empty) when every row has been encoded.
    pub fn next_chunk(&mut self, chunk: &mut RecordChunk) -> CoreResult<bool> {
        chunk.clear();
        while let Some(batch) = self.batches.get(self.batch) {
            if self.writers.is_none() {
                self.writers = Some(Self::writers_for(&self.plan, batch)?);
            }
            let Some((value, key)) = self.writers.as_ref() else {
                break;
            };
            while self.row < batch.num_rows() {
                let row = self.row;
                match value {
                    ValueWriter::Json(enc) => {
                        chunk.values.push_with(|out| enc.write_row(row, out))?;
                    }
                    ValueWriter::Raw(col) => {
                        if col.is_null(row) {
                            chunk.values.push_null()?;
                        } else {
                            chunk.values.push(col.value(row))?;
                        }
                    }
                }
                if let Some(writer) = key {
                    if let Some(keys) = chunk.keys.as_mut() {
                        write_key(writer, row, keys)?;
                    }
                }
                self.row += 1;
                if chunk.values.data_len() >= self.chunk_bytes {
                    return Ok(true);
                }
            }
            self.batch += 1;
            self.row = 0;
            self.writers = None;
        }
        Ok(!chunk.values.is_empty())
    }
}

/// Encodes every row of `batches` following `plan` (from [`plan_kafka`] on the same schema).
pub fn encode_kafka(plan: &KafkaPlan, batches: &[RecordBatch]) -> CoreResult<KafkaRecords> {
    let mut encoder = KafkaEncoder::new(plan.clone(), batches.to_vec());
    let mut records = KafkaRecords::default();
    let mut chunk = encoder.new_chunk();
    while encoder.next_chunk(&mut chunk)? {
        records.num_rows += chunk.values.len();
        records.push(chunk.clone());
    }
    Ok(records)
}

fn write_key(writer: &KeyWriter, row: usize, keys: &mut Payloads) -> CoreResult<()> {
    match writer {
        KeyWriter::Bytes(col) => {
            if col.is_null(row) {
                keys.push_null()
            } else {
                keys.push(col.value(row))
            }
        }
        KeyWriter::Json(col) => {
            if col.is_null(row) {
                keys.push_null()
            } else {
                keys.push_with(|out| col.write(row, out))
            }
        }
    }
}

fn new_chunk(plan: &KafkaPlan, remaining_rows: usize) -> RecordChunk {
    // A first guess of the chunk's row count; the buffers grow if rows are larger.
    let rows = remaining_rows.min(16 * 1024);
    RecordChunk {
        values: Payloads::with_capacity(CHUNK_BYTES + CHUNK_BYTES / 8, rows),
        keys: plan.key.map(|_| Payloads::with_capacity(rows * 16, rows)),
    }
}

impl KafkaRecords {
    fn push(&mut self, chunk: RecordChunk) {
        self.value_bytes += chunk.values.data_len();
        self.key_bytes += chunk.keys.as_ref().map_or(0, Payloads::data_len);
        self.chunks.push(chunk);
    }

    /// Row `i`'s `(key, value)`, for tests and small batches (`None` = null / no key).
    pub fn get(&self, mut i: usize) -> Option<KeyValue<'_>> {
        for chunk in &self.chunks {
            if i < chunk.values.len() {
                let key = chunk.keys.as_ref().and_then(|k| k.get(i));
                return Some((key, chunk.values.get(i)));
            }
            i -= chunk.values.len();
        }
        None
    }
}
