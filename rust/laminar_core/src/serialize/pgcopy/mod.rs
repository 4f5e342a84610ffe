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
//!
//! The module by concern: [`plan`] (the target's types, the Arrow → PostgreSQL mapping each
//! column is checked against), this file (the stream: header, rows, trailer, chunks), `scalars`
//! (the binary form of each scalar type), `numeric` (`numeric` from decimals, integers and
//! floats) and `arrays` (one-dimensional PostgreSQL arrays from Arrow lists).

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

mod arrays;
mod numeric;
mod plan;
mod scalars;

pub use plan::{CopyPlan, plan_pg_copy};

use arrays::build_array_value;
use numeric::build_numeric;
use plan::{PgType, PlannedColumn, is_string};
use scalars::build_scalar_value;

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
