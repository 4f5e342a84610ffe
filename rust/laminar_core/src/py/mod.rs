//! The PyO3 binding shell: converts between Python and the pure core, nothing else.
//! Each submodule binds one core concept and registers its names here.

use pyo3::prelude::*;

pub mod avro;
pub mod budget;
pub mod checksum;
pub mod epoch;
pub mod errors;
pub mod kafka;
pub mod kafka_wire;
pub mod metrics;
pub mod prepared;
pub mod producer;
pub mod protocol;
pub mod redo;
pub mod serialize;
pub mod sink;
pub mod state;

/// Registers every class, function and exception of `laminar._core`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    state::register(m)?;
    epoch::register(m)?;
    sink::register(m)?;
    metrics::register(m)?;
    prepared::register(m)?;
    serialize::register(m)?;
    avro::register(m)?;
    checksum::register(m)?;
    redo::register(m)?;
    kafka::register(m)?;
    kafka_wire::register(m)?;
    producer::register(m)?;
    protocol::register(m)?;
    budget::register(m)?;
    Ok(())
}
