//! The one Rust→Python error bridge: `CoreError` and the protocol's `Refusal` become the matching
//! `laminar.errors` class.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use pyo3::types::PyDict;

use crate::error::CoreError;
use crate::protocol::Refusal;

static ERRORS_MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS_MODULE
        .get_or_try_init(py, || Ok(py.import("laminar.errors")?.unbind()))
        .map(|m| m.bind(py))
}

/// Converts a core error into a Python exception of the `laminar.errors` tree.
pub fn to_py_err(py: Python<'_>, err: CoreError) -> PyErr {
    let (class, message) = match err {
        CoreError::IllegalState(m) => ("IllegalStateError", m),
        CoreError::InvalidStateEncoding(m) => ("InvalidStateEncoding", m),
        CoreError::Config(m) => ("ConfigError", m),
        CoreError::Data(m) => ("DataError", m),
    };
    match errors_module(py).and_then(|m| m.getattr(class)) {
        Ok(cls) => match cls.call1((message,)) {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// Extension to turn `CoreResult<T>` into `PyResult<T>` with `.py_err(py)?`.
pub trait IntoPyResult<T> {
    /// Maps the error through [`to_py_err`].
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, CoreError> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py_err(py, e))
    }
}

/// Converts a refusal of the core (a decision function's or a protocol machine's) into the
/// `laminar.errors` class its kind names, with `sink_id`/`epoch` and a `refusal` attribute
/// holding the kind's name (docs/engine.md, "Refusals").
pub fn refusal_to_py_err(py: Python<'_>, refusal: &Refusal) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = errors_module(py)?.getattr(refusal.kind.error_class())?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("sink_id", refusal.sink_id.as_deref())?;
        kwargs.set_item("epoch", refusal.epoch)?;
        let instance = cls.call((refusal.message.as_str(),), Some(&kwargs))?;
        instance.setattr("refusal", refusal.kind.name())?;
        Ok(PyErr::from_value(instance))
    };
    build().unwrap_or_else(|e| e)
}
