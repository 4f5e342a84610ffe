//! TODO(state): see DESIGN.md.
