//! Attribute macros `#[daemon]` and `#[timer]` for kopf-runtime. Use them through
//! `kopf_runtime` (which re-exports them); see its documentation.
#![forbid(unsafe_code)]
