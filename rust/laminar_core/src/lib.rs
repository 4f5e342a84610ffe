//! Laminar's commit core: sans-io logic for exactly-once transactional sinks.
//!
//! Every module here is pure (no network, no Python); the PyO3 shell lives in `py/` behind the
//! `python` feature so that `cargo test` runs without an interpreter.

pub mod error;
pub mod kafka;
pub mod prepared;
pub mod protocol;
pub mod redo;
pub mod serialize;
pub mod stats;

#[cfg(feature = "python")]
mod py;

#[cfg(feature = "python")]
#[pyo3::pymodule]
fn _core(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    py::register(m)
}
