"""Type stubs for the private Rust extension `laminar._core`."""

__version__: str
