//! `laminar.TransactionalSinkMetrics`: an immutable snapshot of a sink's counters.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::protocol::epoch::TransactionalSinkMetrics;

/// A snapshot of one sink's transaction counters and commit latencies (microseconds).
#[pyclass(
    module = "laminar._core",
    name = "TransactionalSinkMetrics",
    frozen,
    eq
)]
#[derive(Debug, Clone, PartialEq)]
pub struct PyTransactionalSinkMetrics(pub TransactionalSinkMetrics);

macro_rules! metric_getters {
    ($($field:ident: $ty:ty),* $(,)?) => {
        #[pymethods]
        impl PyTransactionalSinkMetrics {
            #[new]
            #[pyo3(signature = (*, $($field = Default::default()),*))]
            #[allow(clippy::too_many_arguments)]
            fn new($($field: $ty),*) -> Self {
                Self(TransactionalSinkMetrics { $($field),* })
            }

            $(
                #[getter]
                fn $field(&self) -> $ty {
                    self.0.$field
                }
            )*

            /// The metrics as a plain dict (field name → value), e.g. for logging or JSON.
            fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                let d = PyDict::new(py);
                $(d.set_item(stringify!($field), self.0.$field)?;)*
                Ok(d)
            }

            fn __repr__(&self) -> String {
                let parts: Vec<String> = vec![$(format!("{}={:?}", stringify!($field), self.0.$field)),*];
                format!("TransactionalSinkMetrics({})", parts.join(", "))
            }

            /// Pickle support: rebuilt from keyword arguments.
            fn __getnewargs_ex__<'py>(&self, py: Python<'py>) -> PyResult<((), Bound<'py, PyDict>)> {
                Ok(((), self.to_dict(py)?))
            }
        }
    };
}

metric_getters! {
    commits: u64,
    aborts: u64,
    events_written: u64,
    bytes_written: u64,
    commit_failures: u64,
    avg_commit_latency_us: f64,
    max_commit_latency_us: u64,
    p50_commit_latency_us: u64,
    p99_commit_latency_us: u64,
    events_committed: u64,
    bytes_committed: u64,
    abort_failures: u64,
    replays_skipped: u64,
}

/// Registers `TransactionalSinkMetrics`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTransactionalSinkMetrics>()
}
