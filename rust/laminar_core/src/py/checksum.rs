//! CRC-32C (Castagnoli) for Python: the checksum of Kafka record batches and of Laminar's persisted
//! encodings, from the same hardware-accelerated crate the core uses.

use pyo3::prelude::*;

/// Computes the CRC-32C of `data` (released from the GIL for large inputs).
#[pyfunction]
#[pyo3(name = "crc32c")]
fn crc32c_py(py: Python<'_>, data: &[u8]) -> u32 {
    if data.len() >= 64 * 1024 {
        py.detach(|| ::crc32c::crc32c(data))
    } else {
        ::crc32c::crc32c(data)
    }
}

/// Registers `crc32c`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(crc32c_py, m)?)
}
