//! Arrow → PostgreSQL `COPY … FROM STDIN (FORMAT BINARY)` streams, driven by the target table's
//! column types (catalog `typname` + `atttypmod`).
//!
//! Written here rather than with the `pgpq` crate (0.12 does track arrow 59): pgpq chooses the
//! Postgres type from the Arrow type, while a sink writes into an existing table whose types decide.
//! We need target-driven conversions (int32 → `int8`, strings → `uuid`, structs → `jsonb` through
//! the JSON encoder, decimal256 → `numeric`), per-value narrowing checks that name the column and
//! row before any byte is sent, and `varchar(n)` / `numeric(p,s)` typmod checks; none of that is in
//! pgpq, and wrapping it would mean casting (copying) columns first.
//!
//! Layout: signature `PGCOPY\n\xff\r\n\0`, flags `i32 0`, header extension length `i32 0`, then per
//! row `i16` field count and per field `i32` length (−1 = NULL) + the type's binary `recv` form,
//! then the trailer `i16 -1`. All integers are big-endian.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, Date64Type, Decimal32Type, Decimal64Type, Decimal128Type,
    Decimal256Type, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, Time32MillisecondType, Time32SecondType, Time64MicrosecondType,
    Time64NanosecondType, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, OffsetSizeTrait, RecordBatch};
use arrow_buffer::{ArrowNativeType, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Schema, TimeUnit};

use super::json::{JsonColumn, check_json_type};
use super::text::{time_of_day_error, time_of_day_in_range, unit_scale};
use crate::error::{CoreError, CoreResult};

/// The COPY BINARY signature, flags and (empty) header extension.
pub const COPY_HEADER: &[u8; 19] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// The COPY BINARY trailer (field count −1).
pub const COPY_TRAILER: &[u8; 2] = b"\xff\xff";
/// Target size of one output chunk.
pub const CHUNK_BYTES: usize = 1 << 20;

/// µs between 1970-01-01 and 2000-01-01 (Postgres' epoch).
const PG_EPOCH_US: i64 = 946_684_800_000_000;
const PG_EPOCH_DAYS: i64 = 10_957;
/// Postgres' timestamp range in µs since 2000-01-01: 4714-11-24 BC .. 294277-01-01 (exclusive).
const PG_TIMESTAMP_MIN: i64 = -211_813_488_000_000_000;
const PG_TIMESTAMP_END: i64 = 9_223_371_331_200_000_000;

/// One column of the target table, as read from the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgColumn {
    /// The column's name in the table.
    pub name: String,
    /// The catalog `typname` (`int4`, `varchar`, `_int4` for arrays, …).
    pub type_name: String,
    /// The catalog `atttypmod` (−1 when none).
    pub typmod: i32,
}

/// Scalar Postgres types the encoder writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PgType {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    /// `numeric(precision, scale)` when the typmod gives them.
    Numeric(Option<(i32, i32)>),
    Text,
    /// `varchar(n)` / `bpchar(n)`: the maximum length in characters.
    Varchar(Option<usize>),
    Bpchar(Option<usize>),
    Bytea,
    Date,
    Time,
    Timestamp,
    Timestamptz,
    Json,
    Jsonb,
    Uuid,
}

impl PgType {
    fn parse(type_name: &str, typmod: i32) -> Option<Self> {
        let char_len = (typmod >= 4).then(|| (typmod - 4) as usize);
        Some(match type_name {
            "bool" => Self::Bool,
            "int2" => Self::Int2,
            "int4" => Self::Int4,
            "int8" => Self::Int8,
            "float4" => Self::Float4,
            "float8" => Self::Float8,
            "numeric" => Self::Numeric((typmod >= 4).then(|| {
                let t = typmod - 4;
                // Postgres 15 packs an 11-bit signed scale below the precision.
                ((t >> 16) & 0xffff, ((t & 0x7ff) ^ 1024) - 1024)
            })),
            "text" => Self::Text,
            "varchar" => Self::Varchar(char_len),
            "bpchar" => Self::Bpchar(char_len),
            "bytea" => Self::Bytea,
            "date" => Self::Date,
            "time" => Self::Time,
            "timestamp" => Self::Timestamp,
            "timestamptz" => Self::Timestamptz,
            "json" => Self::Json,
            "jsonb" => Self::Jsonb,
            "uuid" => Self::Uuid,
            _ => return None,
        })
    }

    fn oid(self) -> u32 {
        match self {
            Self::Bool => 16,
            Self::Bytea => 17,
            Self::Int8 => 20,
            Self::Int2 => 21,
            Self::Int4 => 23,
            Self::Text => 25,
            Self::Json => 114,
            Self::Float4 => 700,
            Self::Float8 => 701,
            Self::Bpchar(_) => 1042,
            Self::Varchar(_) => 1043,
            Self::Date => 1082,
            Self::Time => 1083,
            Self::Timestamp => 1114,
            Self::Timestamptz => 1184,
            Self::Numeric(_) => 1700,
            Self::Uuid => 2950,
            Self::Jsonb => 3802,
        }
    }

    /// Which Arrow types can feed this Postgres type (for error messages).
    fn sources(self) -> &'static str {
        match self {
            Self::Bool => "bool",
            Self::Int2 | Self::Int4 | Self::Int8 => "integers (range checked per value)",
            Self::Float4 | Self::Float8 => "float16/32/64 and integers that convert exactly",
            Self::Numeric(_) => "decimal32/64/128/256, integers, floats",
            Self::Text | Self::Varchar(_) | Self::Bpchar(_) => "string, large_string, string_view",
            Self::Bytea => "binary, large_binary, binary_view, fixed_size_binary, strings",
            Self::Date => "date32, date64",
            Self::Time => "time32, time64",
            Self::Timestamp | Self::Timestamptz => "timestamp (any unit, with or without zone)",
            Self::Json | Self::Jsonb => {
                "JSON text in a string column, or any JSON-encodable type but binary (cast bytes \
                 holding JSON text to string)"
            }
            Self::Uuid => "fixed_size_binary(16), strings in UUID text form",
        }
    }
}

/// A target column resolved against the Arrow schema.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PlannedColumn {
    target: String,
    source: usize,
    pg: PgType,
    array: bool,
}

/// The validated mapping from Arrow columns to the target columns; encode with [`encode_pg_copy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyPlan {
    columns: Vec<PlannedColumn>,
}

impl CopyPlan {
    /// The target column names in COPY order (for the `COPY t (…)` column list).
    pub fn target_columns(&self) -> Vec<&str> {
        self.columns.iter().map(|c| c.target.as_str()).collect()
    }
}

fn decoded(dt: &DataType) -> &DataType {
    match dt {
        DataType::Dictionary(_, v) => decoded(v),
        other => other,
    }
}

fn is_int(dt: &DataType) -> bool {
    dt.is_integer()
}

fn is_string(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

/// Whether an Arrow scalar type can feed a Postgres scalar type.
fn scalar_compatible(column: &str, source: &DataType, pg: PgType) -> bool {
    use DataType as D;
    let source = decoded(source);
    match pg {
        PgType::Bool => matches!(source, D::Boolean),
        PgType::Int2 | PgType::Int4 | PgType::Int8 => is_int(source),
        PgType::Float4 => matches!(
            source,
            D::Float16 | D::Float32 | D::Float64 | D::Int8 | D::Int16 | D::UInt8 | D::UInt16
        ),
        PgType::Float8 => matches!(
            source,
            D::Float16
                | D::Float32
                | D::Float64
                | D::Int8
                | D::Int16
                | D::Int32
                | D::UInt8
                | D::UInt16
                | D::UInt32
        ),
        PgType::Numeric(_) => {
            matches!(
                source,
                D::Decimal32(..) | D::Decimal64(..) | D::Decimal128(..) | D::Decimal256(..)
            ) || is_int(source)
                || matches!(source, D::Float16 | D::Float32 | D::Float64)
        }
        PgType::Text | PgType::Varchar(_) | PgType::Bpchar(_) => is_string(source),
        PgType::Bytea => {
            is_string(source)
                || matches!(
                    source,
                    D::Binary | D::LargeBinary | D::BinaryView | D::FixedSizeBinary(_)
                )
        }
        PgType::Date => matches!(source, D::Date32 | D::Date64),
        PgType::Time => matches!(
            source,
            D::Time32(TimeUnit::Second | TimeUnit::Millisecond)
                | D::Time64(TimeUnit::Microsecond | TimeUnit::Nanosecond)
        ),
        PgType::Timestamp | PgType::Timestamptz => matches!(source, D::Timestamp(..)),
        // a binary column is refused, not written as a base64 JSON string: bytes that hold
        // JSON text (Spark's Kafka `value`) would be stored as "eyJ…" (docs/postgres.md)
        PgType::Json | PgType::Jsonb => {
            is_string(source)
                || (!matches!(
                    source,
                    D::Binary | D::LargeBinary | D::BinaryView | D::FixedSizeBinary(_)
                ) && check_json_type(column, source).is_ok())
        }
        PgType::Uuid => is_string(source) || matches!(source, D::FixedSizeBinary(16)),
    }
}

fn list_element(dt: &DataType) -> Option<&DataType> {
    match decoded(dt) {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Some(f.data_type())
        }
        _ => None,
    }
}

/// Validates the mapping of Arrow columns onto the target columns without encoding anything.
/// `sources[i]` names the Arrow column that feeds `targets[i]` (default: the same name).
/// Errors are `CoreError::Config` naming the column and both types.
pub fn plan_pg_copy(
    schema: &Schema,
    targets: &[PgColumn],
    sources: Option<&[String]>,
) -> CoreResult<CopyPlan> {
    if let Some(sources) = sources {
        if sources.len() != targets.len() {
            return Err(CoreError::Config(format!(
                "{} source columns given for {} target columns; give one Arrow column per \
                 target column",
                sources.len(),
                targets.len()
            )));
        }
    }
    if targets.is_empty() || targets.len() > 1664 {
        return Err(CoreError::Config(format!(
            "COPY needs between 1 and 1664 target columns, got {}",
            targets.len()
        )));
    }
    let mut columns = Vec::with_capacity(targets.len());
    for (i, target) in targets.iter().enumerate() {
        let source_name = sources.map_or(target.name.as_str(), |s| s[i].as_str());
        let source = schema.index_of(source_name).map_err(|_| {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            CoreError::Config(format!(
                "column '{}': the Arrow column '{source_name}' that should feed it is not in the \
                 batch (columns: {names:?})",
                target.name
            ))
        })?;
        let (type_name, array) = match target.type_name.strip_prefix('_') {
            Some(element) => (element, true),
            None => (target.type_name.as_str(), false),
        };
        let pg = PgType::parse(type_name, target.typmod).ok_or_else(|| {
            CoreError::Config(format!(
                "column '{}': PostgreSQL type {} is not supported by the COPY encoder \
                 (supported: bool, int2, int4, int8, float4, float8, numeric, text, varchar, \
                 bpchar, bytea, date, time, timestamp, timestamptz, json, jsonb, uuid and 1-D \
                 arrays of them)",
                target.name, target.type_name
            ))
        })?;
        let source_type = schema.field(source).data_type();
        let compatible = if array {
            list_element(source_type).is_some_and(|element| {
                list_element(element).is_none() && scalar_compatible(&target.name, element, pg)
            })
        } else {
            scalar_compatible(&target.name, source_type, pg)
        };
        if !compatible {
            let wanted = if array {
                format!("a list of {}", pg.sources())
            } else {
                pg.sources().to_string()
            };
            return Err(CoreError::Config(format!(
                "column '{}': Arrow column '{source_name}' of type {source_type} cannot be \
                 written to PostgreSQL type {} (it accepts {wanted}); cast the column first",
                target.name, target.type_name
            )));
        }
        columns.push(PlannedColumn {
            target: target.name.clone(),
            source,
            pg,
            array,
        });
    }
    Ok(CopyPlan { columns })
}

/// The COPY stream of all rows, split into chunks of about [`CHUNK_BYTES`] at row boundaries.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CopyData {
    /// The stream: header in the first chunk, trailer at the end of the last.
    pub chunks: Vec<Vec<u8>>,
    /// Rows written.
    pub num_rows: usize,
    /// Total bytes over all chunks.
    pub total_bytes: usize,
}

/// Encodes the rows of `batches` as one COPY BINARY stream, one chunk at a time into a caller-owned,
/// reused buffer (hot in cache, pages touched once). It owns its plan and batches (the batches
/// share their buffers with the caller's), so a binding can keep it between calls and hand out
/// the stream one chunk at a time.
pub struct CopyEncoder {
    plan: CopyPlan,
    batches: Vec<RecordBatch>,
    batch: usize,
    row: usize,
    row_base: usize,
    started: bool,
    finished: bool,
    writers: Option<Vec<ColumnWriter>>,
    chunk_bytes: usize,
}

impl CopyEncoder {
    /// Starts before the header of the stream for `batches` (following `plan`).
    pub fn new(plan: &CopyPlan, batches: &[RecordBatch]) -> Self {
        Self {
            plan: plan.clone(),
            batches: batches.to_vec(),
            batch: 0,
            row: 0,
            row_base: 0,
            started: false,
            finished: false,
            writers: None,
            chunk_bytes: CHUNK_BYTES,
        }
    }

    /// Ends each chunk once it reaches `bytes` (default [`CHUNK_BYTES`]; whole rows, at least
    /// one per chunk). Small values let tests put chunk boundaries anywhere.
    pub fn with_chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes.max(1);
        self
    }

    fn writers_for(plan: &CopyPlan, batch: &RecordBatch) -> CoreResult<Vec<ColumnWriter>> {
        let mut writers = Vec::with_capacity(plan.columns.len());
        for column in &plan.columns {
            let array = batch.columns().get(column.source).ok_or_else(|| {
                CoreError::Config(format!(
                    "column '{}': a batch has fewer columns than its schema",
                    column.target
                ))
            })?;
            writers.push(ColumnWriter::try_new(column, array)?);
        }
        Ok(writers)
    }

    /// Clears `out` and fills it with the next part of the stream (header first, trailer last),
    /// about [`CHUNK_BYTES`] at row boundaries. Returns `false` (and leaves `out` empty) at the end.
    /// A value that does not fit its column is `CoreError::Data` naming the column and the row.
    pub fn next_chunk(&mut self, out: &mut Vec<u8>) -> CoreResult<bool> {
        out.clear();
        if self.finished {
            return Ok(false);
        }
        if !self.started {
            out.extend_from_slice(COPY_HEADER);
            self.started = true;
        }
        let field_count = (self.plan.columns.len() as i16).to_be_bytes();
        while let Some(batch) = self.batches.get(self.batch) {
            if self.writers.is_none() {
                self.writers = Some(Self::writers_for(&self.plan, batch)?);
            }
            let Some(writers) = self.writers.as_ref() else {
                break;
            };
            while self.row < batch.num_rows() {
                let row = self.row;
                out.extend_from_slice(&field_count);
                for (writer, column) in writers.iter().zip(&self.plan.columns) {
                    if let Err(reason) = writer.write(row, out) {
                        return Err(CoreError::Data(format!(
                            "column '{}' row {}: {reason}",
                            column.target,
                            self.row_base + row
                        )));
                    }
                }
                self.row += 1;
                if out.len() >= self.chunk_bytes {
                    return Ok(true);
                }
            }
            self.row_base += batch.num_rows();
            self.batch += 1;
            self.row = 0;
            self.writers = None;
        }
        out.extend_from_slice(COPY_TRAILER);
        self.finished = true;
        Ok(true)
    }
}

/// Encodes every row of `batches` as one complete COPY BINARY stream following `plan`.
/// Any value that does not fit its column fails the whole call (`CoreError::Data` naming the
/// column and the row) so that nothing is sent for a batch that cannot be written.
pub fn encode_pg_copy(plan: &CopyPlan, batches: &[RecordBatch]) -> CoreResult<CopyData> {
    let mut data = CopyData {
        num_rows: batches.iter().map(RecordBatch::num_rows).sum(),
        ..CopyData::default()
    };
    let mut encoder = CopyEncoder::new(plan, batches);
    let mut out = Vec::with_capacity(CHUNK_BYTES + CHUNK_BYTES / 8);
    while encoder.next_chunk(&mut out)? {
        data.total_bytes += out.len();
        data.chunks.push(out.clone());
    }
    Ok(data)
}

/// Writes one field: the `i32` length and the value, or −1 for NULL. The error is the reason a
/// value cannot be written (the caller adds column and row).
trait PgValue: Send {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String>;
}

struct ColumnWriter {
    nulls: Option<NullBuffer>,
    value: Box<dyn PgValue>,
}

impl ColumnWriter {
    fn try_new(column: &PlannedColumn, array: &ArrayRef) -> CoreResult<Self> {
        build_writer(&column.target, array, column.pg, column.array)
    }

    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        if self.nulls.as_ref().is_some_and(|n| n.is_null(idx)) {
            out.extend_from_slice(&(-1i32).to_be_bytes());
            Ok(())
        } else {
            self.value.write(idx, out)
        }
    }
}

fn malformed(column: &str, array: &dyn Array) -> CoreError {
    CoreError::Config(format!(
        "column '{column}': Arrow type {} does not match its data (malformed array)",
        array.data_type()
    ))
}

fn build_writer(
    column: &str,
    array: &ArrayRef,
    pg: PgType,
    as_array: bool,
) -> CoreResult<ColumnWriter> {
    if let DataType::Dictionary(_, value_type) = array.data_type() {
        // Dictionary columns are decoded once per batch; the COPY form has no dictionaries.
        let plain = arrow_cast::cast(array, value_type)
            .map_err(|e| CoreError::Config(format!("column '{column}': {e}")))?;
        return build_writer(column, &plain, pg, as_array);
    }
    let value: Box<dyn PgValue> = if as_array {
        build_array_value(column, array, pg)?
    } else {
        build_scalar_value(column, array, pg)?
    };
    Ok(ColumnWriter {
        nulls: array.nulls().cloned(),
        value,
    })
}

fn build_array_value(column: &str, array: &ArrayRef, pg: PgType) -> CoreResult<Box<dyn PgValue>> {
    let bad = || malformed(column, array.as_ref());
    Ok(match array.data_type() {
        DataType::List(_) => {
            let list = array.as_list_opt::<i32>().ok_or_else(bad)?;
            Box::new(ArrayValue {
                bounds: ListBounds::Offsets32(list.offsets().clone()),
                elements: build_writer(column, list.values(), pg, false)?,
                element_nulls: list.values().nulls().cloned(),
                oid: pg.oid(),
            })
        }
        DataType::LargeList(_) => {
            let list = array.as_list_opt::<i64>().ok_or_else(bad)?;
            Box::new(ArrayValue {
                bounds: ListBounds::Offsets64(list.offsets().clone()),
                elements: build_writer(column, list.values(), pg, false)?,
                element_nulls: list.values().nulls().cloned(),
                oid: pg.oid(),
            })
        }
        DataType::FixedSizeList(_, size) => {
            let list = array.as_fixed_size_list_opt().ok_or_else(bad)?;
            Box::new(ArrayValue {
                bounds: ListBounds::Fixed(usize::try_from(*size).map_err(|_| bad())?),
                elements: build_writer(column, list.values(), pg, false)?,
                element_nulls: list.values().nulls().cloned(),
                oid: pg.oid(),
            })
        }
        _ => return Err(bad()),
    })
}

#[inline]
fn put<const N: usize>(out: &mut Vec<u8>, bytes: [u8; N]) {
    out.extend_from_slice(&(N as i32).to_be_bytes());
    out.extend_from_slice(&bytes);
}

#[inline]
fn put_var(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), String> {
    let len = i32::try_from(bytes.len()).map_err(|_| {
        format!(
            "a value of {} bytes exceeds PostgreSQL's 1 GB limit",
            bytes.len()
        )
    })?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

/// A fixed-width value converted by `F` (which may refuse a value that does not fit).
struct FixedValue<T: ArrowPrimitiveType, const N: usize, F> {
    values: ScalarBuffer<T::Native>,
    convert: F,
}

impl<T, const N: usize, F> PgValue for FixedValue<T, N, F>
where
    T: ArrowPrimitiveType,
    F: Fn(T::Native) -> Result<[u8; N], String> + Send,
{
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        put(out, (self.convert)(self.values[idx])?);
        Ok(())
    }
}

fn fixed<T, const N: usize, F>(
    column: &str,
    array: &ArrayRef,
    convert: F,
) -> CoreResult<Box<dyn PgValue>>
where
    T: ArrowPrimitiveType,
    F: Fn(T::Native) -> Result<[u8; N], String> + Send + 'static,
{
    let values = array
        .as_primitive_opt::<T>()
        .ok_or_else(|| malformed(column, array.as_ref()))?
        .values()
        .clone();
    Ok(Box::new(FixedValue::<T, N, F> { values, convert }))
}

fn int_to<Out: TryFrom<i64>>(v: impl ArrowNativeType, name: &str) -> Result<Out, String> {
    v.to_i64()
        .and_then(|x| Out::try_from(x).ok())
        .ok_or_else(|| format!("value {v:?} does not fit PostgreSQL {name}"))
}

macro_rules! int_source {
    ($column:expr, $array:expr, $out:ty, $name:expr) => {{
        use DataType as D;
        match $array.data_type() {
            D::Int8 => fixed::<Int8Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::Int16 => fixed::<Int16Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::Int32 => fixed::<Int32Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::Int64 => fixed::<Int64Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::UInt8 => fixed::<UInt8Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::UInt16 => fixed::<UInt16Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::UInt32 => fixed::<UInt32Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::UInt64 => fixed::<UInt64Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            _ => Err(malformed($column, $array.as_ref())),
        }
    }};
}

macro_rules! float_source {
    ($column:expr, $array:expr, $out:ty, $conv:expr) => {{
        use DataType as D;
        let conv = $conv;
        match $array.data_type() {
            D::Float16 => {
                fixed::<Float16Type, _, _>($column, $array, move |v| conv(f64::from(v.to_f32())))
            }
            D::Float32 => fixed::<Float32Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::Float64 => fixed::<Float64Type, _, _>($column, $array, conv),
            D::Int8 => fixed::<Int8Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::Int16 => fixed::<Int16Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::Int32 => fixed::<Int32Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::UInt8 => fixed::<UInt8Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::UInt16 => fixed::<UInt16Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::UInt32 => fixed::<UInt32Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            _ => Err(malformed($column, $array.as_ref())),
        }
    }};
}

fn to_float4(v: f64) -> Result<[u8; 4], String> {
    let narrowed = v as f32;
    if v.is_finite() && !narrowed.is_finite() {
        return Err(format!("value {v:?} does not fit PostgreSQL float4"));
    }
    Ok(narrowed.to_be_bytes())
}

fn build_scalar_value(column: &str, array: &ArrayRef, pg: PgType) -> CoreResult<Box<dyn PgValue>> {
    use DataType as D;
    let bad = || malformed(column, array.as_ref());
    match pg {
        PgType::Bool => {
            let values = array.as_boolean_opt().ok_or_else(bad)?.clone();
            Ok(Box::new(BoolValue(values)))
        }
        PgType::Int2 => int_source!(column, array, i16, "int2"),
        PgType::Int4 => int_source!(column, array, i32, "int4"),
        PgType::Int8 => int_source!(column, array, i64, "int8"),
        PgType::Float4 => {
            float_source!(column, array, f32, |v: f64| to_float4(v))
        }
        PgType::Float8 => {
            float_source!(column, array, f64, |v: f64| Ok::<_, String>(
                v.to_be_bytes()
            ))
        }
        PgType::Numeric(typmod) => build_numeric(column, array, typmod),
        PgType::Text | PgType::Varchar(_) | PgType::Bpchar(_) => {
            let max_chars = match pg {
                PgType::Varchar(n) | PgType::Bpchar(n) => n,
                _ => None,
            };
            Ok(Box::new(TextValue {
                values: StringSource::try_new(array).ok_or_else(bad)?,
                max_chars,
                type_name: match pg {
                    PgType::Varchar(_) => "varchar",
                    PgType::Bpchar(_) => "bpchar",
                    _ => "text",
                },
            }))
        }
        PgType::Bytea => Ok(Box::new(ByteaValue(
            StringSource::try_new(array).ok_or_else(bad)?,
        ))),
        PgType::Date => match array.data_type() {
            D::Date32 => fixed::<Date32Type, 4, _>(column, array, |d| {
                i32::try_from(i64::from(d) - PG_EPOCH_DAYS)
                    .map(i32::to_be_bytes)
                    .map_err(|_| format!("date {d} (days since 1970) is out of range"))
            }),
            D::Date64 => fixed::<Date64Type, 4, _>(column, array, |ms| {
                i32::try_from(ms.div_euclid(86_400_000) - PG_EPOCH_DAYS)
                    .map(i32::to_be_bytes)
                    .map_err(|_| format!("date64 {ms} is out of PostgreSQL's date range"))
            }),
            _ => Err(bad()),
        },
        // Times outside the day are refused as the JSON encoder refuses them (text.rs).
        PgType::Time => match array.data_type() {
            D::Time32(TimeUnit::Second) => fixed::<Time32SecondType, 8, _>(column, array, |s| {
                pg_time(i64::from(s), TimeUnit::Second)
            }),
            D::Time32(TimeUnit::Millisecond) => {
                fixed::<Time32MillisecondType, 8, _>(column, array, |ms| {
                    pg_time(i64::from(ms), TimeUnit::Millisecond)
                })
            }
            D::Time64(TimeUnit::Microsecond) => {
                fixed::<Time64MicrosecondType, 8, _>(column, array, |us| {
                    pg_time(us, TimeUnit::Microsecond)
                })
            }
            D::Time64(TimeUnit::Nanosecond) => {
                fixed::<Time64NanosecondType, 8, _>(column, array, |ns| {
                    pg_time(ns, TimeUnit::Nanosecond)
                })
            }
            _ => Err(bad()),
        },
        PgType::Timestamp | PgType::Timestamptz => match array.data_type() {
            D::Timestamp(TimeUnit::Second, _) => {
                fixed::<TimestampSecondType, 8, _>(column, array, |v| pg_timestamp(v, 1_000_000))
            }
            D::Timestamp(TimeUnit::Millisecond, _) => {
                fixed::<TimestampMillisecondType, 8, _>(column, array, |v| pg_timestamp(v, 1_000))
            }
            D::Timestamp(TimeUnit::Microsecond, _) => {
                fixed::<TimestampMicrosecondType, 8, _>(column, array, |v| pg_timestamp(v, 1))
            }
            D::Timestamp(TimeUnit::Nanosecond, _) => {
                fixed::<TimestampNanosecondType, 8, _>(column, array, |v| {
                    pg_timestamp(v.div_euclid(1_000), 1)
                })
            }
            _ => Err(bad()),
        },
        PgType::Json | PgType::Jsonb => {
            let jsonb = pg == PgType::Jsonb;
            if is_string(array.data_type()) {
                Ok(Box::new(JsonTextValue {
                    values: StringSource::try_new(array).ok_or_else(bad)?,
                    jsonb,
                }))
            } else {
                Ok(Box::new(JsonEncodedValue {
                    column: JsonColumn::try_new(column, array)?,
                    jsonb,
                }))
            }
        }
        PgType::Uuid => match array.data_type() {
            D::FixedSizeBinary(16) => Ok(Box::new(ByteaValue(
                StringSource::try_new(array).ok_or_else(bad)?,
            ))),
            _ => Ok(Box::new(UuidTextValue(
                StringSource::try_new(array).ok_or_else(bad)?,
            ))),
        },
    }
}

/// A time of day in `unit`s as PostgreSQL's `time` (microseconds; nanoseconds truncated), refused
/// outside `00:00:00 ..= 24:00:00`.
fn pg_time(value: i64, unit: TimeUnit) -> Result<[u8; 8], String> {
    let (per_second, _) = unit_scale(unit);
    if !time_of_day_in_range(value, per_second) {
        return Err(time_of_day_error(value, unit));
    }
    Ok((value.div_euclid(per_second) * 1_000_000
        + value.rem_euclid(per_second) * 1_000_000 / per_second)
        .to_be_bytes())
}

#[inline]
fn pg_timestamp(value: i64, us_per_unit: i64) -> Result<[u8; 8], String> {
    value
        .checked_mul(us_per_unit)
        .and_then(|us| us.checked_sub(PG_EPOCH_US))
        .filter(|us| (PG_TIMESTAMP_MIN..PG_TIMESTAMP_END).contains(us))
        .map(i64::to_be_bytes)
        .ok_or_else(|| format!("timestamp {value} is outside PostgreSQL's timestamp range"))
}

struct BoolValue(arrow_array::BooleanArray);
impl PgValue for BoolValue {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        put(out, [u8::from(self.0.value(idx))]);
        Ok(())
    }
}

/// Any string/binary-like column read as bytes (the COPY form has no dictionaries or views).
enum StringSource {
    Str(arrow_array::StringArray),
    LargeStr(arrow_array::LargeStringArray),
    StrView(arrow_array::StringViewArray),
    Bin(arrow_array::BinaryArray),
    LargeBin(arrow_array::LargeBinaryArray),
    BinView(arrow_array::BinaryViewArray),
    Fixed(arrow_array::FixedSizeBinaryArray),
}

impl StringSource {
    fn try_new(array: &ArrayRef) -> Option<Self> {
        Some(match array.data_type() {
            DataType::Utf8 => Self::Str(array.as_string_opt()?.clone()),
            DataType::LargeUtf8 => Self::LargeStr(array.as_string_opt()?.clone()),
            DataType::Utf8View => Self::StrView(array.as_string_view_opt()?.clone()),
            DataType::Binary => Self::Bin(array.as_binary_opt()?.clone()),
            DataType::LargeBinary => Self::LargeBin(array.as_binary_opt()?.clone()),
            DataType::BinaryView => Self::BinView(array.as_binary_view_opt()?.clone()),
            DataType::FixedSizeBinary(_) => Self::Fixed(array.as_fixed_size_binary_opt()?.clone()),
            _ => return None,
        })
    }

    #[inline]
    fn value(&self, i: usize) -> &[u8] {
        match self {
            Self::Str(a) => a.value(i).as_bytes(),
            Self::LargeStr(a) => a.value(i).as_bytes(),
            Self::StrView(a) => a.value(i).as_bytes(),
            Self::Bin(a) => a.value(i),
            Self::LargeBin(a) => a.value(i),
            Self::BinView(a) => a.value(i),
            Self::Fixed(a) => a.value(i),
        }
    }
}

struct TextValue {
    values: StringSource,
    max_chars: Option<usize>,
    type_name: &'static str,
}
impl PgValue for TextValue {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let bytes = self.values.value(idx);
        if let Some(max) = self.max_chars {
            // Byte length bounds the character count: count only when it could exceed.
            if bytes.len() > max {
                let chars = bytes.iter().filter(|&&b| (b & 0xc0) != 0x80).count();
                // varchar(n) and char(n) both accept a longer string whose excess characters are
                // all spaces: PostgreSQL truncates it to n (its varchar_input / bpchar_input,
                // which COPY BINARY runs with the column's typmod).
                let trimmed = chars - bytes.iter().rev().take_while(|&&b| b == b' ').count();
                if trimmed > max {
                    return Err(format!(
                        "a string of {chars} characters does not fit PostgreSQL {}({max})",
                        self.type_name
                    ));
                }
            }
        }
        if memchr::memchr(0, bytes).is_some() {
            return Err(
                "strings with a NUL character (U+0000) cannot be stored in PostgreSQL text"
                    .to_string(),
            );
        }
        put_var(out, bytes)
    }
}

struct ByteaValue(StringSource);
impl PgValue for ByteaValue {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        put_var(out, self.0.value(idx))
    }
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Parses `8-4-4-4-12` hex UUID text (or 32 hex digits) into 16 bytes.
fn parse_uuid(text: &[u8]) -> Option<[u8; 16]> {
    let mut nibbles = [0u8; 32];
    let mut n = 0;
    match text.len() {
        36 => {
            for (i, &b) in text.iter().enumerate() {
                if matches!(i, 8 | 13 | 18 | 23) {
                    if b != b'-' {
                        return None;
                    }
                    continue;
                }
                nibbles[n] = hex_val(b)?;
                n += 1;
            }
        }
        32 => {
            for (slot, &b) in nibbles.iter_mut().zip(text) {
                *slot = hex_val(b)?;
            }
        }
        _ => return None,
    }
    let mut bytes = [0u8; 16];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = (nibbles[2 * i] << 4) | nibbles[2 * i + 1];
    }
    Some(bytes)
}

struct UuidTextValue(StringSource);
impl PgValue for UuidTextValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let text = self.0.value(idx);
        let bytes = parse_uuid(text).ok_or_else(|| {
            format!(
                "{:?} is not a UUID (expected 8-4-4-4-12 hex digits)",
                String::from_utf8_lossy(&text[..text.len().min(64)])
            )
        })?;
        put(out, bytes);
        Ok(())
    }
}

/// Whether JSON text contains the escape `\u0000`, which `jsonb` rejects.
fn has_nul_escape(json: &[u8]) -> bool {
    memchr::memmem::find_iter(json, b"\\u0000").any(|pos| {
        // The escape is real when preceded by an even number of backslashes.
        json[..pos]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count()
            % 2
            == 0
    })
}

struct JsonTextValue {
    values: StringSource,
    jsonb: bool,
}
impl PgValue for JsonTextValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let text = self.values.value(idx);
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(text) {
            return Err(format!("the string is not valid JSON ({e})"));
        }
        write_json_field(out, text, self.jsonb)
    }
}

fn write_json_field(out: &mut Vec<u8>, json: &[u8], jsonb: bool) -> Result<(), String> {
    if jsonb {
        if has_nul_escape(json) {
            return Err("jsonb cannot store the character U+0000 (\\u0000)".to_string());
        }
        let len = i32::try_from(json.len() + 1).map_err(|_| "JSON value too large".to_string())?;
        out.extend_from_slice(&len.to_be_bytes());
        out.push(1); // jsonb binary format version
        out.extend_from_slice(json);
        Ok(())
    } else {
        put_var(out, json)
    }
}

struct JsonEncodedValue {
    column: JsonColumn,
    jsonb: bool,
}
impl PgValue for JsonEncodedValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        // Reserve the length word and the version byte, encode in place, then patch the length.
        let start = out.len();
        out.extend_from_slice(&[0, 0, 0, 0]);
        if self.jsonb {
            out.push(1);
        }
        let body = out.len();
        self.column.write(idx, out);
        if self.jsonb && has_nul_escape(&out[body..]) {
            out.truncate(start);
            return Err("jsonb cannot store the character U+0000 (\\u0000)".to_string());
        }
        let len = i32::try_from(out.len() - start - 4).map_err(|_| {
            out.truncate(start);
            "JSON value too large".to_string()
        })?;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }
}

enum ListBounds {
    Offsets32(OffsetBuffer<i32>),
    Offsets64(OffsetBuffer<i64>),
    Fixed(usize),
}

impl ListBounds {
    #[inline]
    fn range(&self, idx: usize) -> (usize, usize) {
        fn r<O: OffsetSizeTrait>(o: &OffsetBuffer<O>, idx: usize) -> (usize, usize) {
            (o[idx].as_usize(), o[idx + 1].as_usize())
        }
        match self {
            Self::Offsets32(o) => r(o, idx),
            Self::Offsets64(o) => r(o, idx),
            Self::Fixed(size) => (idx * size, (idx + 1) * size),
        }
    }
}

/// A one-dimensional Postgres array (lower bound 1) from an Arrow list.
struct ArrayValue {
    bounds: ListBounds,
    elements: ColumnWriter,
    element_nulls: Option<NullBuffer>,
    oid: u32,
}
impl PgValue for ArrayValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let (start, end) = self.bounds.range(idx);
        let count = end - start;
        let field = out.len();
        out.extend_from_slice(&[0, 0, 0, 0]);
        if count == 0 {
            out.extend_from_slice(&0i32.to_be_bytes());
            out.extend_from_slice(&0i32.to_be_bytes());
            out.extend_from_slice(&self.oid.to_be_bytes());
        } else {
            let has_null = self
                .element_nulls
                .as_ref()
                .is_some_and(|n| (start..end).any(|i| n.is_null(i)));
            let dim = i32::try_from(count).map_err(|_| "array too long".to_string())?;
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&i32::from(has_null).to_be_bytes());
            out.extend_from_slice(&self.oid.to_be_bytes());
            out.extend_from_slice(&dim.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            for i in start..end {
                if let Err(e) = self.elements.write(i, out) {
                    out.truncate(field);
                    return Err(format!("array element {}: {e}", i - start + 1));
                }
            }
        }
        let len = i32::try_from(out.len() - field - 4).map_err(|_| {
            out.truncate(field);
            "array value too large".to_string()
        })?;
        out[field..field + 4].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// numeric

/// `numeric(p, s)` limits checked per value: at most `p - s` digits before the point (Postgres
/// rounds extra fraction digits itself).
fn check_numeric_fits(
    typmod: Option<(i32, i32)>,
    digit_count: usize,
    scale: i32,
    text: impl FnOnce() -> String,
) -> Result<(), String> {
    if let Some((precision, target_scale)) = typmod {
        let int_digits = if digit_count == 0 {
            0
        } else {
            digit_count as i64 - i64::from(scale)
        };
        if int_digits > i64::from(precision - target_scale) {
            return Err(format!(
                "value {} does not fit PostgreSQL numeric({precision},{target_scale})",
                text()
            ));
        }
    }
    Ok(())
}

/// Number of significant digits of an ASCII digit string (0 for zero).
fn significant(digits: &[u8]) -> usize {
    digits.len() - digits.iter().take_while(|&&d| d == b'0').count()
}

/// [`write_numeric`] for magnitudes below 10^16 and scales ≥ 0, with integer arithmetic only.
#[inline]
fn write_numeric_u64(out: &mut Vec<u8>, negative: bool, magnitude: u64, scale: u32) {
    if magnitude == 0 {
        put(out, numeric_header(0, 0, false, scale as usize));
        return;
    }
    // Align the decimal point on a base-10000 group boundary.
    let pad = (4 - scale % 4) % 4;
    let mut m = magnitude * 10u64.pow(pad);
    let frac_groups = ((scale + pad) / 4) as i32;
    // Groups from the least significant; at most 5 for m < 10^19.
    let mut groups = [0i16; 5];
    let mut n = 0;
    while m > 0 && n < groups.len() {
        groups[n] = (m % 10_000) as i16;
        m /= 10_000;
        n += 1;
    }
    let lowest = groups[..n].iter().take_while(|&&g| g == 0).count();
    let ndigits = n - lowest;
    let weight = (n as i32 - 1) - frac_groups;
    out.extend_from_slice(&((8 + 2 * ndigits) as i32).to_be_bytes());
    out.extend_from_slice(&numeric_header(
        ndigits as i16,
        weight as i16,
        negative,
        scale as usize,
    ));
    for g in groups[lowest..n].iter().rev() {
        out.extend_from_slice(&g.to_be_bytes());
    }
}

/// Writes a `numeric` field for `±digits × 10^-scale` (`digits` ASCII, no leading zeros unless "0").
fn write_numeric(out: &mut Vec<u8>, negative: bool, digits: &[u8], scale: i32) {
    let (scale, trailing_zeros) = if scale < 0 {
        (0usize, scale.unsigned_abs() as usize)
    } else {
        (scale as usize, 0)
    };
    let zero = digits.iter().all(|&d| d == b'0');
    if zero {
        put(out, numeric_header(0, 0, false, scale));
        return;
    }
    let len = digits.len() + trailing_zeros;
    let int_len = len as i64 - scale as i64;
    let pad_left = (4 - int_len.rem_euclid(4)) as usize % 4;
    let pad_right = (4 - scale % 4) % 4;
    let total = pad_left + len + pad_right;
    let groups = total / 4;
    let frac_groups = (scale + pad_right) / 4;
    let digit_at = |p: usize| -> i16 {
        if p < pad_left || p >= pad_left + len {
            0
        } else {
            let i = p - pad_left;
            if i < digits.len() {
                i16::from(digits[i] - b'0')
            } else {
                0
            }
        }
    };
    let group = |g: usize| -> i16 {
        let p = g * 4;
        digit_at(p) * 1000 + digit_at(p + 1) * 100 + digit_at(p + 2) * 10 + digit_at(p + 3)
    };
    let mut first = 0;
    while first < groups && group(first) == 0 {
        first += 1;
    }
    let mut last = groups;
    while last > first && group(last - 1) == 0 {
        last -= 1;
    }
    let weight = groups as i64 - frac_groups as i64 - 1 - first as i64;
    let ndigits = last - first;
    let field_len = 8 + 2 * ndigits;
    out.extend_from_slice(&(field_len as i32).to_be_bytes());
    out.extend_from_slice(&(ndigits as i16).to_be_bytes());
    out.extend_from_slice(&(weight as i16).to_be_bytes());
    out.extend_from_slice(&(if negative { 0x4000u16 } else { 0 }).to_be_bytes());
    out.extend_from_slice(&(scale as u16).to_be_bytes());
    for g in first..last {
        out.extend_from_slice(&group(g).to_be_bytes());
    }
}

fn numeric_header(ndigits: i16, weight: i16, negative: bool, dscale: usize) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[0..2].copy_from_slice(&ndigits.to_be_bytes());
    h[2..4].copy_from_slice(&weight.to_be_bytes());
    h[4..6].copy_from_slice(&(if negative { 0x4000u16 } else { 0 }).to_be_bytes());
    h[6..8].copy_from_slice(&(dscale as u16).to_be_bytes());
    h
}

/// `numeric` special values: NaN, +Infinity, -Infinity (Postgres 14+).
#[cold]
fn write_numeric_non_finite(out: &mut Vec<u8>, v: f64) {
    let sign: u16 = if v.is_nan() {
        0xC000
    } else if v > 0.0 {
        0xD000
    } else {
        0xF000
    };
    let mut h = [0u8; 8];
    h[4..6].copy_from_slice(&sign.to_be_bytes());
    put(out, h);
}

struct NumericDecimal<N: ArrowNativeType> {
    values: ScalarBuffer<N>,
    scale: i8,
    typmod: Option<(i32, i32)>,
}
impl<N: ArrowNativeType + Into<i128>> PgValue for NumericDecimal<N> {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let v: i128 = self.values[idx].into();
        let scale = i32::from(self.scale);
        if let Ok(magnitude) = u64::try_from(v.unsigned_abs()) {
            if magnitude < 10u64.pow(16) && scale >= 0 {
                if let Some(typmod) = self.typmod {
                    let digit_count = magnitude.checked_ilog10().map_or(0, |d| d as usize + 1);
                    check_numeric_fits(Some(typmod), digit_count, scale, || {
                        let mut t = Vec::new();
                        super::text::write_decimal_i128(&mut t, v, self.scale);
                        String::from_utf8_lossy(&t).into_owned()
                    })?;
                }
                write_numeric_u64(out, v < 0, magnitude, scale as u32);
                return Ok(());
            }
        }
        let mut buf = itoa::Buffer::new();
        let digits = buf.format(v.unsigned_abs()).as_bytes();
        check_numeric_fits(self.typmod, significant(digits), scale, || {
            let mut t = Vec::new();
            super::text::write_decimal_i128(&mut t, v, self.scale);
            String::from_utf8_lossy(&t).into_owned()
        })?;
        write_numeric(out, v < 0, digits, scale);
        Ok(())
    }
}

struct NumericDecimal256 {
    values: ScalarBuffer<arrow_buffer::i256>,
    scale: i8,
    typmod: Option<(i32, i32)>,
}
impl PgValue for NumericDecimal256 {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let text = self.values[idx].to_string();
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.as_str()),
        };
        let scale = i32::from(self.scale);
        check_numeric_fits(self.typmod, significant(digits.as_bytes()), scale, || {
            let mut t = Vec::new();
            super::text::write_decimal_i256(&mut t, self.values[idx], self.scale);
            String::from_utf8_lossy(&t).into_owned()
        })?;
        write_numeric(out, negative, digits.as_bytes(), scale);
        Ok(())
    }
}

struct NumericInt<N: ArrowNativeType> {
    values: ScalarBuffer<N>,
    typmod: Option<(i32, i32)>,
}
impl<N: ArrowNativeType + itoa::Integer + Into<i128>> PgValue for NumericInt<N> {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let v: i128 = self.values[idx].into();
        let mut buf = itoa::Buffer::new();
        let digits = buf.format(v.unsigned_abs()).as_bytes();
        check_numeric_fits(self.typmod, significant(digits), 0, || v.to_string())?;
        write_numeric(out, v < 0, digits, 0);
        Ok(())
    }
}

/// Floats become the exact decimal of their shortest round-trip text (0.1 → 0.1, not
/// 0.1000000000000000055…); NaN and ±Infinity become numeric's NaN and ±Infinity.
struct NumericFloat {
    values: ScalarBuffer<f64>,
    typmod: Option<(i32, i32)>,
}
impl PgValue for NumericFloat {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let v = self.values[idx];
        if !v.is_finite() {
            write_numeric_non_finite(out, v);
            return Ok(());
        }
        let mut buf = zmij::Buffer::new();
        let text = buf.format_finite(v);
        let (digits, scale) = float_digits(text);
        check_numeric_fits(self.typmod, significant(&digits), scale, || {
            text.to_string()
        })?;
        write_numeric(out, v.is_sign_negative() && v != 0.0, &digits, scale);
        Ok(())
    }
}

/// Splits zmij's text (`-1.25e-7`, `123.0`, `1e+21`) into significant digits and a decimal scale.
fn float_digits(text: &str) -> (Vec<u8>, i32) {
    let text = text.trim_start_matches('-');
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (text, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).collect();
    let mut scale = frac_part.len() as i32 - exponent;
    while digits.len() > 1 && digits.last() == Some(&b'0') && scale > 0 {
        digits.pop();
        scale -= 1;
    }
    let lead = digits.iter().take_while(|&&d| d == b'0').count();
    digits.drain(..lead.min(digits.len().saturating_sub(1)));
    (digits, scale)
}

fn build_numeric(
    column: &str,
    array: &ArrayRef,
    typmod: Option<(i32, i32)>,
) -> CoreResult<Box<dyn PgValue>> {
    use DataType as D;
    let bad = || malformed(column, array.as_ref());
    macro_rules! prim {
        ($t:ty) => {
            array
                .as_primitive_opt::<$t>()
                .ok_or_else(bad)?
                .values()
                .clone()
        };
    }
    Ok(match array.data_type() {
        D::Decimal32(_, s) => Box::new(NumericDecimal {
            values: prim!(Decimal32Type),
            scale: *s,
            typmod,
        }),
        D::Decimal64(_, s) => Box::new(NumericDecimal {
            values: prim!(Decimal64Type),
            scale: *s,
            typmod,
        }),
        D::Decimal128(_, s) => Box::new(NumericDecimal {
            values: prim!(Decimal128Type),
            scale: *s,
            typmod,
        }),
        D::Decimal256(_, s) => Box::new(NumericDecimal256 {
            values: prim!(Decimal256Type),
            scale: *s,
            typmod,
        }),
        D::Int8 => Box::new(NumericInt {
            values: prim!(Int8Type),
            typmod,
        }),
        D::Int16 => Box::new(NumericInt {
            values: prim!(Int16Type),
            typmod,
        }),
        D::Int32 => Box::new(NumericInt {
            values: prim!(Int32Type),
            typmod,
        }),
        D::Int64 => Box::new(NumericInt {
            values: prim!(Int64Type),
            typmod,
        }),
        D::UInt8 => Box::new(NumericInt {
            values: prim!(UInt8Type),
            typmod,
        }),
        D::UInt16 => Box::new(NumericInt {
            values: prim!(UInt16Type),
            typmod,
        }),
        D::UInt32 => Box::new(NumericInt {
            values: prim!(UInt32Type),
            typmod,
        }),
        D::UInt64 => Box::new(NumericInt {
            values: prim!(UInt64Type),
            typmod,
        }),
        D::Float16 => Box::new(NumericFloat {
            values: prim!(Float16Type)
                .iter()
                .map(|v| f64::from(v.to_f32()))
                .collect::<Vec<f64>>()
                .into(),
            typmod,
        }),
        D::Float32 => Box::new(NumericFloat32 {
            values: prim!(Float32Type),
            typmod,
        }),
        D::Float64 => Box::new(NumericFloat {
            values: prim!(Float64Type),
            typmod,
        }),
        _ => return Err(bad()),
    })
}

/// `f32` → numeric through the `f32`'s own shortest text (0.1f32 → 0.1).
struct NumericFloat32 {
    values: ScalarBuffer<f32>,
    typmod: Option<(i32, i32)>,
}
impl PgValue for NumericFloat32 {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let v = self.values[idx];
        if !v.is_finite() {
            write_numeric_non_finite(out, f64::from(v));
            return Ok(());
        }
        let mut buf = zmij::Buffer::new();
        let text = buf.format_finite(v);
        let (digits, scale) = float_digits(text);
        check_numeric_fits(self.typmod, significant(&digits), scale, || {
            text.to_string()
        })?;
        write_numeric(out, v.is_sign_negative() && v != 0.0, &digits, scale);
        Ok(())
    }
}
