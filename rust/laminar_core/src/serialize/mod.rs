//! Arrow → Kafka payloads and PostgreSQL COPY BINARY (the hot path).
//!
//! Pure: no pyo3. The binding shell (`py/serialize.rs`) imports Arrow data through the PyCapsule
//! interface, calls [`check_batch`] and one of the encoders with the GIL released, and turns the
//! output buffers into Python objects.
//!
//! - [`avro`]: Avro binary in the Confluent wire format, and the Avro schema of an Arrow schema.
//! - [`json`]: one JSON object per row (the exact format rules are in `docs/serialization.md`).
//! - [`kafka`]: `(key, value)` payloads per row, JSON or a raw column.
//! - [`kafka_shape`]: Spark's Kafka-sink shape (per-row topic, partition, headers).
//! - [`pgcopy`]: `COPY … (FORMAT BINARY)` streams for a target table's columns.

pub mod avro;
pub mod bytes;
pub mod json;
pub mod kafka;
pub mod kafka_shape;
pub mod pgcopy;
pub mod text;

#[cfg(test)]
mod integrity_tests;
#[cfg(test)]
mod tests;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Time32MillisecondType, Time32SecondType, Time64MicrosecondType,
    Time64NanosecondType,
};
use arrow_array::{Array, ArrayRef, OffsetSizeTrait, RecordBatch};
use arrow_buffer::ArrowNativeType;
use arrow_schema::{DataType, TimeUnit};

use crate::error::{CoreError, CoreResult};
use text::{time_of_day_error, time_of_day_in_range, unit_scale};

/// Checks that the data of an imported batch matches its declared types (offsets in bounds,
/// strings valid UTF-8, dictionary keys in range) and that values lie in their type's domain
/// (times of day within the day), so that malformed input from a foreign producer is a clear
/// `DataError` — the same for every encoder — instead of undefined behaviour or invalid output.
pub fn check_batch(batch: &RecordBatch) -> CoreResult<()> {
    let schema = batch.schema();
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        column.to_data().validate_full().map_err(|e| {
            CoreError::Data(format!(
                "column '{}' of type {}: the Arrow data is malformed ({e})",
                field.name(),
                field.data_type()
            ))
        })?;
        if has_time(field.data_type()) {
            check_times(field.name(), column, true)?;
        }
    }
    Ok(())
}

/// Whether `dt` is or contains a time32/time64 type.
fn has_time(dt: &DataType) -> bool {
    match dt {
        DataType::Time32(_) | DataType::Time64(_) => true,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => has_time(f.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| has_time(f.data_type())),
        DataType::Dictionary(_, value) => has_time(value),
        _ => false,
    }
}

/// Every time of day in `array` (and its nested values) is within the day; `top`: `array` is a
/// column of the batch, so its index is the row.
fn check_times(column: &str, array: &ArrayRef, top: bool) -> CoreResult<()> {
    let bad = |index: usize, value: i64, unit: TimeUnit| {
        let place = if top {
            format!("row {index}")
        } else {
            "a nested value".to_string()
        };
        Err(CoreError::Data(format!(
            "column '{column}' {place}: {}",
            time_of_day_error(value, unit)
        )))
    };
    match array.data_type() {
        DataType::Time32(_) | DataType::Time64(_) => {
            let found = match array.data_type() {
                DataType::Time32(TimeUnit::Second) => {
                    first_outside_day::<Time32SecondType>(array, TimeUnit::Second)
                }
                DataType::Time32(TimeUnit::Millisecond) => {
                    first_outside_day::<Time32MillisecondType>(array, TimeUnit::Millisecond)
                }
                DataType::Time64(TimeUnit::Microsecond) => {
                    first_outside_day::<Time64MicrosecondType>(array, TimeUnit::Microsecond)
                }
                DataType::Time64(TimeUnit::Nanosecond) => {
                    first_outside_day::<Time64NanosecondType>(array, TimeUnit::Nanosecond)
                }
                _ => None,
            };
            match found {
                Some((index, value, unit)) => bad(index, value, unit),
                None => Ok(()),
            }
        }
        DataType::List(_) => check_list_values::<i32>(column, array),
        DataType::LargeList(_) => check_list_values::<i64>(column, array),
        DataType::FixedSizeList(_, _) => match array.as_fixed_size_list_opt() {
            Some(list) => check_times(column, list.values(), false),
            None => Ok(()),
        },
        DataType::Map(_, _) => match array.as_map_opt() {
            Some(map) => {
                let offsets = map.offsets();
                let (start, end) = (offsets[0].as_usize(), offsets[offsets.len() - 1].as_usize());
                let entries: ArrayRef =
                    std::sync::Arc::new(map.entries().slice(start, end - start));
                check_times(column, &entries, false)
            }
            None => Ok(()),
        },
        DataType::Struct(_) => match array.as_struct_opt() {
            Some(fields) => fields
                .columns()
                .iter()
                .try_for_each(|child| check_times(column, child, top)),
            None => Ok(()),
        },
        DataType::Dictionary(_, _) => match array.as_any_dictionary_opt() {
            Some(dictionary) => check_times(column, dictionary.values(), false),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// The values a list's offsets reach (a sliced list's child holds more).
fn check_list_values<O: OffsetSizeTrait>(column: &str, array: &ArrayRef) -> CoreResult<()> {
    let Some(list) = array.as_list_opt::<O>() else {
        return Ok(());
    };
    let offsets = list.offsets();
    let (start, end) = (offsets[0].as_usize(), offsets[offsets.len() - 1].as_usize());
    check_times(column, &list.values().slice(start, end - start), false)
}

/// The first non-null value outside the day, with its index (and the unit, for the message).
fn first_outside_day<T>(array: &ArrayRef, unit: TimeUnit) -> Option<(usize, i64, TimeUnit)>
where
    T: ArrowPrimitiveType,
    T::Native: Into<i64>,
{
    let (per_second, _) = unit_scale(unit);
    let values = array.as_primitive_opt::<T>()?;
    values.iter().enumerate().find_map(|(index, value)| {
        let value: i64 = value?.into();
        (!time_of_day_in_range(value, per_second)).then_some((index, value, unit))
    })
}
