//! TODO(prepared): see DESIGN.md.
