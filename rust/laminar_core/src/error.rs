//! TODO(error): see DESIGN.md.
