//! Tests of the viewer.
