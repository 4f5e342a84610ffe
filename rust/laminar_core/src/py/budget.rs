//! Binds `protocol::retry`: the client time-outs derived from a sink's budgets (seconds in and
//! out, as the sinks hold them; librdkafka's settings in whole milliseconds).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::protocol::retry::{
    self, AttemptNext, KafkaBudgets, KafkaOverrides, KafkaTimeouts, TxnCall, after_attempt,
    failover_pause, postgres_answer_ms,
};
use crate::py::errors::IntoPyResult;

/// Seconds as whole milliseconds (`ValueError` for a negative or non-finite value).
fn millis(name: &str, seconds: f64) -> PyResult<u64> {
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{name} must be a finite number of seconds >= 0, got {seconds}"
        )));
    }
    Ok((seconds * 1000.0).round() as u64)
}

/// Every client time-out of a Kafka sink (`kafka_timeouts`).
#[pyclass(module = "laminar._core", name = "KafkaTimeouts", frozen, eq)]
#[derive(Debug, Clone, PartialEq)]
pub struct PyKafkaTimeouts(KafkaTimeouts);

#[pymethods]
impl PyKafkaTimeouts {
    /// How long one request may wait for its answer, in seconds.
    #[getter]
    fn request_s(&self) -> f64 {
        self.0.request_ms as f64 / 1000.0
    }

    /// How long a new connection's set-up may take, in seconds.
    #[getter]
    fn setup_s(&self) -> f64 {
        self.0.setup_ms as f64 / 1000.0
    }

    /// How far a transactional call may overrun its time-out before it is taken as stuck.
    #[getter]
    fn grace_s(&self) -> f64 {
        self.0.grace_ms as f64 / 1000.0
    }

    /// `transaction.timeout.ms` in force.
    #[getter]
    fn transaction_ms(&self) -> u64 {
        self.0.transaction_ms
    }

    /// The time-out of one attempt of a transactional call bounded by `bound_s`, in seconds.
    fn attempt_s(&self, bound_s: f64) -> PyResult<f64> {
        Ok(self.0.attempt_ms(millis("bound_s", bound_s)?) as f64 / 1000.0)
    }

    /// The librdkafka settings derived from the budgets: name → milliseconds.
    fn librdkafka_settings(&self) -> Vec<(&'static str, u64)> {
        self.0.librdkafka_settings().to_vec()
    }

    fn __repr__(&self) -> String {
        let t = &self.0;
        format!(
            "KafkaTimeouts(request_ms={}, setup_ms={}, reconnect_backoff_ms={}, \
             reconnect_backoff_max_ms={}, ack_timeout_ms={}, grace_ms={}, transaction_ms={})",
            t.request_ms,
            t.setup_ms,
            t.reconnect_backoff_ms,
            t.reconnect_backoff_max_ms,
            t.ack_timeout_ms,
            t.grace_ms,
            t.transaction_ms
        )
    }
}

/// The client time-outs of a Kafka sink with these budgets (`protocol::retry`); the producer's
/// explicit `socket.timeout.ms` / `socket.connection.setup.timeout.ms` / `reconnect.backoff.ms`
/// / `reconnect.backoff.max.ms` win. `ConfigError` for a `socket.timeout.ms` librdkafka refuses
/// beside the transaction time-out, or a first reconnect back-off above the ceiling.
#[pyfunction]
#[pyo3(signature = (
    init_timeout_s, commit_timeout_s, flush_timeout_s, transaction_timeout_ms=None, *,
    socket_timeout_ms=None, setup_timeout_ms=None, reconnect_backoff_ms=None,
    reconnect_backoff_max_ms=None,
))]
#[allow(clippy::too_many_arguments)]
fn kafka_timeouts(
    py: Python<'_>,
    init_timeout_s: f64,
    commit_timeout_s: f64,
    flush_timeout_s: f64,
    transaction_timeout_ms: Option<u64>,
    socket_timeout_ms: Option<u64>,
    setup_timeout_ms: Option<u64>,
    reconnect_backoff_ms: Option<u64>,
    reconnect_backoff_max_ms: Option<u64>,
) -> PyResult<PyKafkaTimeouts> {
    let budgets = KafkaBudgets {
        init_ms: millis("init_timeout_s", init_timeout_s)?,
        commit_ms: millis("commit_timeout_s", commit_timeout_s)?,
        flush_ms: millis("flush_timeout_s", flush_timeout_s)?,
        transaction_ms: transaction_timeout_ms,
    };
    let overrides = KafkaOverrides {
        request_ms: socket_timeout_ms,
        setup_ms: setup_timeout_ms,
        reconnect_backoff_ms,
        reconnect_backoff_max_ms,
    };
    Ok(PyKafkaTimeouts(budgets.timeouts(overrides).py_err(py)?))
}

/// What follows a failed attempt of librdkafka transactional call `call` (its confluent-kafka
/// name; `protocol::retry::after_attempt`): `"retry"` on the same producer, `"replace"` the
/// producer, or `"give_up"`.
#[pyfunction]
#[pyo3(signature = (call, *, retriable, silent, ran_out, attempt, retries, time_left))]
fn attempt_next(
    call: &str,
    retriable: bool,
    silent: bool,
    ran_out: bool,
    attempt: u32,
    retries: u32,
    time_left: bool,
) -> PyResult<&'static str> {
    let Some(call) = TxnCall::parse(call) else {
        return Err(PyValueError::new_err(format!(
            "{call:?} is not a transactional call (init_transactions, \
             send_offsets_to_transaction, commit_transaction, abort_transaction)"
        )));
    };
    Ok(
        match after_attempt(
            call, retriable, silent, ran_out, attempt, retries, time_left,
        ) {
            AttemptNext::Retry => "retry",
            AttemptNext::Replace => "replace",
            AttemptNext::GiveUp => "give_up",
        },
    )
}

/// The pause in seconds before attempt `attempt` + 1 of a call that met a failover, with
/// `left_s` left of its operation's budget, or None to give up (`protocol::retry`).
#[pyfunction]
#[pyo3(signature = (attempt, left_s))]
fn failover_pause_s(attempt: u32, left_s: f64) -> Option<f64> {
    // NaN and anything not above zero: nothing left; infinity: no deadline
    let left_ms = if left_s > 0.0 {
        (left_s * 1000.0).min(u64::MAX as f64) as u64
    } else {
        0
    };
    failover_pause(attempt, left_ms).map(|ms| ms as f64 / 1000.0)
}

/// The PostgreSQL performer's deadline on one wait for the server's answer, in seconds, for a
/// sink whose budget for one answer is `statement_timeout_s` (`protocol::retry`).
#[pyfunction]
fn postgres_answer_timeout(statement_timeout_s: f64) -> PyResult<f64> {
    let statement_ms = millis("statement_timeout_s", statement_timeout_s)?;
    Ok(postgres_answer_ms(statement_ms) as f64 / 1000.0)
}

/// How long to wait for librdkafka's report of the producer id and epoch, in seconds
/// (`protocol::retry::identity_wait_ms`).
#[pyfunction]
fn identity_wait_s(statistics_interval_ms: u64) -> f64 {
    retry::identity_wait_ms(statistics_interval_ms) as f64 / 1000.0
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyKafkaTimeouts>()?;
    m.add_function(wrap_pyfunction!(kafka_timeouts, m)?)?;
    m.add_function(wrap_pyfunction!(postgres_answer_timeout, m)?)?;
    m.add_function(wrap_pyfunction!(attempt_next, m)?)?;
    m.add_function(wrap_pyfunction!(failover_pause_s, m)?)?;
    m.add_function(wrap_pyfunction!(identity_wait_s, m)?)?;
    Ok(())
}
