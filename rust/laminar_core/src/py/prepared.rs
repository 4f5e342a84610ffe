//! `laminar.PreparedTxnState`: the persisted prepared-transaction state as an immutable value.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyType};

use crate::prepared::{PreparedTxnState, TaggedFields};
use crate::py::errors::IntoPyResult;

/// The persisted state of one prepared transaction (see `_core.pyi`).
#[pyclass(module = "laminar._core", name = "PreparedTxnState", frozen, eq, hash)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PyPreparedTxnState(pub PreparedTxnState);

const FIELDS: [&str; 8] = [
    "transactional_id",
    "epoch",
    "attempt",
    "producer_id",
    "producer_epoch",
    "record_count",
    "created_at_ms",
    "tagged_fields",
];

fn tagged_fields_from(value: &Bound<'_, PyAny>) -> PyResult<TaggedFields> {
    if value.is_none() {
        return Ok(TaggedFields::new());
    }
    let dict = value.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "tagged_fields must be a dict[int, bytes] or None, got {}",
            value
                .get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    let mut fields = TaggedFields::new();
    for (tag, bytes) in dict.iter() {
        let tag: u32 = tag.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "tagged field tags must be integers from 0 to {}, got {}",
                u32::MAX,
                tag.repr().map_or_else(|_| "?".into(), |r| r.to_string())
            ))
        })?;
        let bytes = bytes.cast::<PyBytes>().map_err(|_| {
            PyTypeError::new_err(format!("tagged field {tag}: the value must be bytes"))
        })?;
        fields.insert_raw(tag, bytes.as_bytes().to_vec());
    }
    Ok(fields)
}

fn set_field(state: &mut PreparedTxnState, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
    match name {
        "transactional_id" => state.transactional_id = value.extract()?,
        "epoch" => state.epoch = value.extract()?,
        "attempt" => state.attempt = value.extract()?,
        "producer_id" => state.producer_id = value.extract()?,
        "producer_epoch" => state.producer_epoch = value.extract()?,
        "record_count" => state.record_count = value.extract()?,
        "created_at_ms" => state.created_at_ms = value.extract()?,
        "tagged_fields" => state.tagged_fields = tagged_fields_from(value)?,
        other => {
            return Err(PyTypeError::new_err(format!(
                "replace() got an unexpected keyword argument '{other}'; the fields are {}",
                FIELDS.join(", ")
            )));
        }
    }
    Ok(())
}

#[pymethods]
impl PyPreparedTxnState {
    #[new]
    #[pyo3(signature = (
        transactional_id,
        epoch,
        attempt=0,
        producer_id=-1,
        producer_epoch=-1,
        record_count=0,
        created_at_ms=0,
        tagged_fields=None,
    ))]
    #[pyo3(
        text_signature = "(transactional_id, epoch, attempt=0, producer_id=-1, \
                             producer_epoch=-1, record_count=0, created_at_ms=0, \
                             tagged_fields=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        transactional_id: Option<String>,
        epoch: i64,
        attempt: u64,
        producer_id: i64,
        producer_epoch: i32,
        record_count: u64,
        created_at_ms: i64,
        tagged_fields: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let state = PreparedTxnState {
            transactional_id,
            epoch,
            attempt,
            producer_id,
            producer_epoch,
            record_count,
            created_at_ms,
            tagged_fields: match tagged_fields {
                Some(t) => tagged_fields_from(t)?,
                None => TaggedFields::new(),
            },
        };
        state.validate().py_err(py)?;
        Ok(Self(state))
    }

    /// Decodes the text form (`"lm1." + base64url`).
    #[staticmethod]
    fn parse(py: Python<'_>, text: &str) -> PyResult<Self> {
        PreparedTxnState::parse(text).py_err(py).map(Self)
    }

    /// Decodes the binary form.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Self> {
        PreparedTxnState::from_bytes(data).py_err(py).map(Self)
    }

    /// The canonical binary form.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.0.to_bytes())
    }

    /// A copy with the given fields changed.
    #[pyo3(signature = (**changes))]
    fn replace(&self, py: Python<'_>, changes: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut state = self.0.clone();
        if let Some(changes) = changes {
            for (name, value) in changes.iter() {
                let name = name.cast::<PyString>()?.to_str()?.to_owned();
                set_field(&mut state, &name, &value)?;
            }
        }
        state.validate().py_err(py)?;
        Ok(Self(state))
    }

    #[getter]
    fn transactional_id(&self) -> Option<&str> {
        self.0.transactional_id.as_deref()
    }

    #[getter]
    fn epoch(&self) -> i64 {
        self.0.epoch
    }

    #[getter]
    fn attempt(&self) -> u64 {
        self.0.attempt
    }

    #[getter]
    fn producer_id(&self) -> i64 {
        self.0.producer_id
    }

    #[getter]
    fn producer_epoch(&self) -> i32 {
        self.0.producer_epoch
    }

    #[getter]
    fn record_count(&self) -> u64 {
        self.0.record_count
    }

    #[getter]
    fn created_at_ms(&self) -> i64 {
        self.0.created_at_ms
    }

    /// The tagged fields, including tags this laminar does not know, as a new dict.
    #[getter]
    fn tagged_fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (tag, value) in self.0.tagged_fields.iter() {
            d.set_item(tag, PyBytes::new(py, value))?;
        }
        Ok(d)
    }

    fn __str__(&self) -> String {
        self.0.to_text()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let s = &self.0;
        let id = match &s.transactional_id {
            Some(id) => PyString::new(py, id).repr()?.to_string(),
            None => "None".to_owned(),
        };
        let mut out = format!(
            "PreparedTxnState(transactional_id={id}, epoch={}, attempt={}, producer_id={}, \
             producer_epoch={}, record_count={}, created_at_ms={}",
            s.epoch, s.attempt, s.producer_id, s.producer_epoch, s.record_count, s.created_at_ms
        );
        if !s.tagged_fields.is_empty() {
            out.push_str(", tagged_fields=");
            out.push_str(&self.tagged_fields(py)?.repr()?.to_string());
        }
        out.push(')');
        Ok(out)
    }

    /// Pickle support: rebuilt from the canonical binary form.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let py = slf.py();
        let cls: Bound<'py, PyType> = slf.get_type();
        Ok((cls.getattr("from_bytes")?, (slf.get().to_bytes(py),)))
    }
}

/// Registers `PreparedTxnState`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPreparedTxnState>()
}
