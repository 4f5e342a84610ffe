//! TODO(epoch): see DESIGN.md.
