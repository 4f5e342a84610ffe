//! Bindings of `protocol`: the crash points, the commands and events of the driver loop, the
//! machines (`protocol/machines.rs`) and the shared rules. Typed in `_core.pyi`; the driver loop
//! is described in docs/engine.md.

mod command;
mod event;
mod machines;

pub use command::PyCommand;
pub use event::{PyEvent, ResultTuple, result_tuple};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::errors::refusal_to_py_err;
use crate::protocol::command::ParticipantState;
use crate::protocol::crash::{CrashPoint, Position, Protocol};
use crate::protocol::{Epoch, gid, names, records, retry};
use crate::protocol::{Refusal, RefusalKind};

/// A crash point (see `_core.pyi`).
#[pyclass(
    module = "laminar._core",
    name = "CrashPoint",
    frozen,
    eq,
    hash,
    from_py_object
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyCrashPoint(pub CrashPoint);

fn protocol_of(name: &str) -> PyResult<Protocol> {
    Protocol::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = Protocol::ALL.iter().map(|p| p.name()).collect();
        PyValueError::new_err(format!(
            "unknown protocol {name:?}; expected one of {known:?}"
        ))
    })
}

#[pymethods]
impl PyCrashPoint {
    /// Every crash point, protocol by protocol.
    #[staticmethod]
    fn all() -> Vec<PyCrashPoint> {
        CrashPoint::ALL.iter().map(|p| PyCrashPoint(*p)).collect()
    }

    /// The points of one protocol.
    #[staticmethod]
    fn for_protocol(protocol: &str) -> PyResult<Vec<PyCrashPoint>> {
        Ok(CrashPoint::for_protocol(protocol_of(protocol)?)
            .into_iter()
            .map(PyCrashPoint)
            .collect())
    }

    /// The point a name (`atomic.after_decision`) denotes.
    #[staticmethod]
    fn parse(name: &str) -> PyResult<PyCrashPoint> {
        CrashPoint::from_name(name)
            .map(PyCrashPoint)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "unknown crash point {name:?}; CrashPoint.all() lists them"
                ))
            })
    }

    #[getter]
    fn name(&self) -> &'static str {
        self.0.name()
    }

    #[getter]
    fn protocol(&self) -> &'static str {
        self.0.protocol().name()
    }

    #[getter]
    fn after(&self) -> &'static str {
        self.0.after()
    }

    #[getter]
    fn position(&self) -> &'static str {
        match self.0.position() {
            Position::After => "after",
            Position::Within => "within",
        }
    }

    #[getter]
    fn in_task(&self) -> bool {
        self.0.in_task()
    }

    #[getter]
    fn phase(&self) -> &'static str {
        self.0.phase().name()
    }

    #[getter]
    fn decided(&self) -> bool {
        self.0.decided()
    }

    fn __repr__(&self) -> String {
        format!("CrashPoint({:?})", self.0.name())
    }

    fn __str__(&self) -> &'static str {
        self.0.name()
    }
}

/// The `laminar.errors` exception for a refusal kind (the one bridge; replaces a table in
/// Python).
#[pyfunction]
#[pyo3(signature = (kind, message, *, sink_id=None, epoch=None))]
fn refusal_error(
    py: Python<'_>,
    kind: &str,
    message: String,
    sink_id: Option<String>,
    epoch: Option<Epoch>,
) -> PyResult<Py<PyAny>> {
    let kind = RefusalKind::from_name(kind)
        .ok_or_else(|| PyValueError::new_err(format!("unknown refusal kind {kind:?}")))?;
    let refusal = Refusal {
        kind,
        message,
        sink_id,
        epoch,
    };
    Ok(refusal_to_py_err(py, &refusal).into_value(py).into_any())
}

/// The checkpoint-reset guard (docs/protocol.md §5): `("keep", base, None)` or `("claim", base,
/// replaced owner)`; a foreign owner without `restart` raises `ConfigError` (the bridge).
#[pyfunction]
#[pyo3(signature = (
    registry_id, members, *, owner, epoch_base, member_owners, last_committed, mine, restart,
))]
#[allow(clippy::too_many_arguments)]
fn owner_decision(
    py: Python<'_>,
    registry_id: &str,
    members: Vec<String>,
    owner: Option<String>,
    epoch_base: Epoch,
    member_owners: Vec<(String, String)>,
    last_committed: Vec<Option<Epoch>>,
    mine: Option<String>,
    restart: bool,
) -> PyResult<(&'static str, Epoch, Option<String>)> {
    let records = records::OwnerRecords {
        registry_id,
        members: &members,
        owner: owner.as_deref(),
        epoch_base,
        member_owners: &member_owners,
        last_committed: &last_committed,
    };
    match records::owner_decision(&records, mine.as_deref(), restart) {
        Ok(records::OwnerDecision::Keep { epoch_base }) => Ok(("keep", epoch_base, None)),
        Ok(records::OwnerDecision::Claim {
            epoch_base,
            replaced,
        }) => Ok(("claim", epoch_base, replaced)),
        Err(r) => Err(refusal_to_py_err(py, &r)),
    }
}

/// The one retry rule (`protocol::retry`): the delay in seconds before the next attempt of an
/// epoch whose attempt `attempt` failed with `kind`, or `None` to give up. The backoff is taken in
/// whole milliseconds, as the machines take it.
#[pyfunction]
#[pyo3(signature = (attempt, retries, retry_backoff_s, kind, *, retriable=true, awaiting=false))]
fn retry_delay(
    attempt: u32,
    retries: u32,
    retry_backoff_s: f64,
    kind: &str,
    retriable: bool,
    awaiting: bool,
) -> PyResult<Option<f64>> {
    if !retry_backoff_s.is_finite() || retry_backoff_s < 0.0 {
        return Err(PyValueError::new_err(format!(
            "retry_backoff_s must be a finite number of seconds >= 0, got {retry_backoff_s}"
        )));
    }
    let backoff_ms = (retry_backoff_s * 1000.0).round() as u64;
    let failure = event::failure_kind(kind, retriable)?;
    Ok(
        retry::retry_delay_ms(attempt, retries, backoff_ms, failure, awaiting)
            .map(|ms| ms as f64 / 1000.0),
    )
}

/// Whether a sink whose last committed epoch is `last` holds `epoch`.
#[pyfunction]
fn epoch_committed(last: Option<Epoch>, epoch: Epoch) -> bool {
    records::epoch_committed(last, epoch)
}

/// The epoch base past every committed epoch.
#[pyfunction]
fn next_epoch_base(base: Epoch, committed: Vec<Option<Epoch>>) -> Epoch {
    records::next_epoch_base(base, committed)
}

/// The epoch `resolve_stopped` fences a group up to.
#[pyfunction]
fn stop_fence_epoch(in_flight: Vec<Epoch>, last_committed: Option<Epoch>) -> Epoch {
    records::stop_fence_epoch(in_flight, last_committed)
}

/// The distributed transaction id of one epoch of a group.
#[pyfunction]
fn dtid(group_id: &str, epoch: Epoch) -> String {
    names::dtid(group_id, epoch)
}

/// A group's id when the user names none (sorted sink ids joined with `+`, …).
#[pyfunction]
#[pyo3(signature = (sink_ids, scale_out = false))]
fn default_group_id(sink_ids: Vec<String>, scale_out: bool) -> String {
    names::default_group_id(&sink_ids, scale_out)
}

/// The consumer group holding a Kafka sink's epoch marker.
#[pyfunction]
fn marker_group(transactional_id: &str) -> String {
    names::marker_group(transactional_id)
}

/// The consumer group holding a Kafka sink's identity.
#[pyfunction]
fn identity_group(transactional_id: &str) -> String {
    names::identity_group(transactional_id)
}

/// The transactional id of Kafka sink `transactional_id` in partition `part`.
#[pyfunction]
fn kafka_participant_id(transactional_id: &str, part: u32) -> String {
    names::kafka_participant_id(transactional_id, part)
}

/// The participant name of PostgreSQL sink `sink_id` in partition `part` (`pg:<sink>:p<part>`).
#[pyfunction]
fn postgres_participant_name(sink_id: &str, part: u32) -> String {
    names::postgres_participant(sink_id, part)
}

/// The participant name of a Kafka participant's transactional id (`kafka:<tid>.p<part>`).
#[pyfunction]
fn kafka_participant_name(participant_id: &str) -> String {
    names::kafka_participant(participant_id)
}

/// `(base transactional id, part)` of a participant id, or None.
#[pyfunction]
fn participant_base(participant_id: &str) -> Option<(String, u32)> {
    names::participant_base(participant_id).map(|(b, p)| (b.to_owned(), p))
}

/// Whether a prepared gid is the participant a `dt_participant` row names (exact).
#[pyfunction]
fn participant_matches(resource: &str, gid: &str) -> bool {
    names::participant_matches(resource, gid)
}

/// Whether a scale-out participant in `state` (as `laminar.dt_participant.state` stores it)
/// may still hold its transaction open (ValueError: no such state).
#[pyfunction]
fn participant_open(state: &str) -> PyResult<bool> {
    ParticipantState::from_name(state)
        .map(ParticipantState::open)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown participant state {state:?}; expected claimed, prepared, committed or \
                 rolled_back"
            ))
        })
}

/// The gid of `sink_id`'s `epoch`, partition `part` (ValueError: a negative epoch).
#[pyfunction]
#[pyo3(signature = (sink_id, epoch, part = 0))]
fn make_gid(sink_id: &str, epoch: Epoch, part: u32) -> PyResult<String> {
    gid::make_gid(sink_id, epoch, part).map_err(|e| PyValueError::new_err(e.0))
}

/// The prefix every gid of `sink_id` starts with.
#[pyfunction]
fn gid_prefix(sink_id: &str) -> String {
    gid::gid_prefix(sink_id)
}

/// `(sink_part, sink_id or None, epoch, part)` of a laminar gid, or None.
#[pyfunction]
fn parse_gid(text: &str) -> Option<(String, Option<String>, Epoch, u32)> {
    gid::parse_gid(text).map(|g| (g.sink_part, g.sink_id, g.epoch, g.part))
}

/// Registers the protocol engine.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCrashPoint>()?;
    m.add_class::<PyCommand>()?;
    m.add_class::<PyEvent>()?;
    m.add_function(wrap_pyfunction!(refusal_error, m)?)?;
    m.add_function(wrap_pyfunction!(owner_decision, m)?)?;
    m.add_function(wrap_pyfunction!(epoch_committed, m)?)?;
    m.add_function(wrap_pyfunction!(retry_delay, m)?)?;
    m.add_function(wrap_pyfunction!(next_epoch_base, m)?)?;
    m.add_function(wrap_pyfunction!(stop_fence_epoch, m)?)?;
    m.add_function(wrap_pyfunction!(dtid, m)?)?;
    m.add_function(wrap_pyfunction!(default_group_id, m)?)?;
    m.add_function(wrap_pyfunction!(marker_group, m)?)?;
    m.add_function(wrap_pyfunction!(identity_group, m)?)?;
    m.add_function(wrap_pyfunction!(kafka_participant_id, m)?)?;
    m.add_function(wrap_pyfunction!(participant_base, m)?)?;
    m.add_function(wrap_pyfunction!(postgres_participant_name, m)?)?;
    m.add_function(wrap_pyfunction!(kafka_participant_name, m)?)?;
    m.add_function(wrap_pyfunction!(participant_matches, m)?)?;
    m.add_function(wrap_pyfunction!(participant_open, m)?)?;
    m.add_function(wrap_pyfunction!(make_gid, m)?)?;
    m.add_function(wrap_pyfunction!(gid_prefix, m)?)?;
    m.add_function(wrap_pyfunction!(parse_gid, m)?)?;
    m.add("GID_MAX_BYTES", gid::GID_MAX_BYTES)?;
    m.add("GID_PREFIX", gid::GID_PREFIX)?;
    machines::register(m)
}
