//! The PyO3 binding shell: converts between Python and the pure core, nothing else.

use pyo3::prelude::*;

/// Registers every class, function and exception of `laminar._core`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
