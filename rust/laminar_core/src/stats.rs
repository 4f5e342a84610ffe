//! TODO(stats): see DESIGN.md.
