//! Bindings of `serialize::avro`: the Avro schema of an Arrow schema, and Arrow rows encoded as
//! Confluent-framed Avro records (with the GIL released), returned as `KafkaRecords`.

use arrow_array::RecordBatch;
use pyo3::prelude::*;
use pyo3::types::PyList;

use super::errors::IntoPyResult;
use super::serialize::{
    PyKafkaRecords, import_batches, import_schema, push_payloads, run_detached,
};
use crate::serialize::avro::{self, AvroKey, AvroNames, AvroWriter};
use crate::serialize::check_batch;

fn names(name: String, namespace: Option<String>) -> AvroNames {
    AvroNames { name, namespace }
}

/// The Avro record schema (JSON text) of every column of `schema`.
#[pyfunction]
#[pyo3(signature = (schema, *, name, namespace = None))]
fn avro_value_schema(
    py: Python<'_>,
    schema: &Bound<'_, PyAny>,
    name: String,
    namespace: Option<String>,
) -> PyResult<String> {
    let schema = import_schema(schema)?;
    avro::value_schema(&schema, &names(name, namespace)).py_err(py)
}

/// The Avro schema (JSON text) of the key column `key`: a record for a struct column.
#[pyfunction]
#[pyo3(signature = (schema, key, *, name, namespace = None))]
fn avro_key_schema(
    py: Python<'_>,
    schema: &Bound<'_, PyAny>,
    key: String,
    name: String,
    namespace: Option<String>,
) -> PyResult<String> {
    let schema = import_schema(schema)?;
    avro::key_schema(&schema, &key, &names(name, namespace)).py_err(py)
}

/// Every row of `data` as a Kafka record whose value is Avro in the Confluent wire format.
#[pyfunction]
#[pyo3(signature = (
    data, *, value_schema, value_schema_id, key = None, key_schema = None, key_schema_id = None
))]
fn encode_kafka_avro(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    value_schema: String,
    value_schema_id: u32,
    key: Option<String>,
    key_schema: Option<String>,
    key_schema_id: Option<u32>,
) -> PyResult<PyKafkaRecords> {
    let value = AvroWriter {
        schema: value_schema,
        id: value_schema_id,
    };
    let key = match (key, key_schema, key_schema_id) {
        (None, _, _) => None,
        (Some(column), Some(schema), Some(id)) => Some(AvroKey::Avro {
            column,
            writer: AvroWriter { schema, id },
        }),
        (Some(column), None, None) => Some(AvroKey::Plain { column }),
        _ => {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "key_schema and key_schema_id go together",
            ));
        }
    };
    let (schema, batches) = import_batches(py, data)?;
    let chunk = run_detached(py, || {
        for batch in &batches {
            check_batch(batch)?;
        }
        avro::encode_avro(&schema, &batches, &value, key.as_ref())
    })?;
    let num_rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut values = Vec::with_capacity(num_rows);
    push_payloads(py, &chunk.values, &mut values);
    let (keys, key_bytes) = match &chunk.keys {
        Some(payloads) => {
            let mut out = Vec::with_capacity(num_rows);
            push_payloads(py, payloads, &mut out);
            (Some(PyList::new(py, out)?.unbind()), payloads.data_len())
        }
        None => (None, 0),
    };
    Ok(PyKafkaRecords::plain(
        PyList::new(py, values)?.unbind(),
        keys,
        num_rows,
        chunk.values.data_len(),
        key_bytes,
    ))
}

/// Registers the Avro functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(avro_value_schema, m)?)?;
    m.add_function(wrap_pyfunction!(avro_key_schema, m)?)?;
    m.add_function(wrap_pyfunction!(encode_kafka_avro, m)?)?;
    Ok(())
}
