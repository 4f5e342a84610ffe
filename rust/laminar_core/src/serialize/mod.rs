//! Arrow → Kafka payloads and PostgreSQL COPY BINARY (the hot path).
//!
//! Pure: no pyo3. The binding shell (`py/serialize.rs`) imports Arrow data through the PyCapsule
//! interface, calls [`check_batch`] and one of the encoders with the GIL released, and turns the
//! output buffers into Python objects.
//!
//! - [`json`]: one JSON object per row (the exact format rules are in `docs/serialization.md`).
//! - [`kafka`]: `(key, value)` payloads per row, JSON or a raw column.
//! - [`pgcopy`]: `COPY … (FORMAT BINARY)` streams for a target table's columns.

pub mod json;
pub mod kafka;
pub mod pgcopy;
pub mod text;

#[cfg(test)]
mod tests;

use arrow_array::RecordBatch;

use crate::error::{CoreError, CoreResult};

/// Checks that the data of an imported batch matches its declared types (offsets in bounds,
/// strings valid UTF-8, dictionary keys in range), so that malformed input from a foreign producer
/// is a clear error instead of undefined behaviour or invalid output.
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
    }
    Ok(())
}
