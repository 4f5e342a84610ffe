//! The PyO3 binding shell: converts between Python and the pure core, nothing else.
//! Each submodule binds one core concept and registers its names here.

use pyo3::prelude::*;

pub mod errors;
pub mod serialize;

/// Registers every class, function and exception of `laminar._core`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    serialize::register(m)?;
    Ok(())
}
