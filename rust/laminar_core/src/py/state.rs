//! `laminar.TransactionState`: an immutable value for the core's [`TransactionState`].

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::protocol::state::{StateKind, TransactionState};

/// Where a sink's transaction is: `name` is one of "Idle", "Active", "Prepared", "Committing",
/// "Aborting", "Failed"; `epoch` is the open epoch (None when idle).
#[pyclass(module = "laminar._core", name = "TransactionState", frozen, eq, hash)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyTransactionState(pub TransactionState);

fn of(kind: StateKind, epoch: i64) -> PyResult<PyTransactionState> {
    if epoch < 0 {
        return Err(PyValueError::new_err(format!(
            "TransactionState.{}: epoch must be >= 0, got {epoch}",
            kind.name()
        )));
    }
    Ok(PyTransactionState(kind.with_epoch(epoch)))
}

impl PyTransactionState {
    /// `TransactionState.Active(epoch=3)`, `TransactionState.Idle()`: evaluates back to the value.
    pub fn repr(&self) -> String {
        match self.0.epoch() {
            None => format!("TransactionState.{}()", self.0.name()),
            Some(e) => format!("TransactionState.{}(epoch={e})", self.0.name()),
        }
    }
}

/// What `__reduce__` returns: the class and its constructor arguments `(name, epoch)`.
type Reduced<'py> = (Bound<'py, PyType>, (&'static str, Option<i64>));

#[pymethods]
impl PyTransactionState {
    #[new]
    #[pyo3(signature = (name, epoch=None))]
    fn new(name: &str, epoch: Option<i64>) -> PyResult<Self> {
        let Some(kind) = StateKind::from_name(name) else {
            let names: Vec<&str> = StateKind::ALL.iter().map(|k| k.name()).collect();
            return Err(PyValueError::new_err(format!(
                "unknown transaction state '{name}'; expected one of {}",
                names.join(", ")
            )));
        };
        match (kind, epoch) {
            (StateKind::Idle, None) => Ok(Self(TransactionState::Idle)),
            (StateKind::Idle, Some(e)) => Err(PyValueError::new_err(format!(
                "TransactionState Idle has no epoch, got epoch={e}"
            ))),
            (k, None) => Err(PyValueError::new_err(format!(
                "TransactionState {} needs an epoch",
                k.name()
            ))),
            (k, Some(e)) => of(k, e),
        }
    }

    /// No transaction open.
    #[classmethod]
    #[pyo3(name = "Idle")]
    fn idle(_cls: &Bound<'_, PyType>) -> Self {
        Self(TransactionState::Idle)
    }

    /// A transaction open for `epoch`, being written.
    #[classmethod]
    #[pyo3(name = "Active")]
    fn active(_cls: &Bound<'_, PyType>, epoch: i64) -> PyResult<Self> {
        of(StateKind::Active, epoch)
    }

    /// Flushed and ready to commit.
    #[classmethod]
    #[pyo3(name = "Prepared")]
    fn prepared(_cls: &Bound<'_, PyType>, epoch: i64) -> PyResult<Self> {
        of(StateKind::Prepared, epoch)
    }

    /// Commit sent, outcome pending.
    #[classmethod]
    #[pyo3(name = "Committing")]
    fn committing(_cls: &Bound<'_, PyType>, epoch: i64) -> PyResult<Self> {
        of(StateKind::Committing, epoch)
    }

    /// Abort sent, outcome pending.
    #[classmethod]
    #[pyo3(name = "Aborting")]
    fn aborting(_cls: &Bound<'_, PyType>, epoch: i64) -> PyResult<Self> {
        of(StateKind::Aborting, epoch)
    }

    /// Commit or abort outcome unknown: recovery must resolve it.
    #[classmethod]
    #[pyo3(name = "Failed")]
    fn failed(_cls: &Bound<'_, PyType>, epoch: i64) -> PyResult<Self> {
        of(StateKind::Failed, epoch)
    }

    #[getter]
    fn name(&self) -> &'static str {
        self.0.name()
    }

    #[getter]
    fn epoch(&self) -> Option<i64> {
        self.0.epoch()
    }

    /// Whether an epoch's transaction is held (`Active` or `Prepared`): an abort discards it.
    fn holds_transaction(&self) -> bool {
        self.0.holds_transaction()
    }

    fn __repr__(&self) -> String {
        self.repr()
    }

    fn __str__(&self) -> String {
        self.0.to_string()
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Reduced<'py>> {
        let state = slf.get().0;
        Ok((slf.get_type(), (state.name(), state.epoch())))
    }
}

/// Registers `TransactionState`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTransactionState>()
}
