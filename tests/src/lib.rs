//! Test support for the workspace tests: connecting to the test API server, per-test namespaces,
//! CRD installation and clean-up.
#![forbid(unsafe_code)]
