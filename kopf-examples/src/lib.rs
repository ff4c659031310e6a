//! Example operators built with kopf-runtime, and the types they share (the example CRD).
#![forbid(unsafe_code)]

pub mod crd;
