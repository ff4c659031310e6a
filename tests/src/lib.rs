//! Test support for the workspace tests: connecting to the test API server, per-test namespaces,
//! CRD installation, polling with deadlines, and independent test environments.
//!
//! Integration tests run against the real kube-apiserver of `tools/kube-testenv`:
//!
//! ```text
//! tools/kube-testenv/build.sh
//! eval "$(tools/kube-testenv/start.sh)"     # exports KUBECONFIG
//! cargo test -p kopf-tests --test testenv
//! tools/kube-testenv/stop.sh
//! ```
//!
//! A typical test:
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> anyhow::Result<()> {
//! use std::time::Duration;
//! use kube::CustomResourceExt;
//! use kopf_examples::crd::{KopfExample, KopfExampleSpec};
//! use kopf_tests::{TestNamespace, install_crd, test_client, wait_for};
//!
//! let client = test_client().await; // panics with instructions if KUBECONFIG is unset
//! install_crd(&client, &KopfExample::crd()).await?;
//! let mut ns = TestNamespace::create().await?;
//! ns.strip_finalizers_of::<KopfExample>();
//! let api = ns.api::<KopfExample>();
//! api.create(&Default::default(), &KopfExample::new("ex", KopfExampleSpec::default())).await?;
//! wait_for("ex to exist", Duration::from_secs(10), || async { api.get("ex").await }).await;
//! ns.cleanup().await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

mod client;
mod crd;
mod kubectl;
mod namespace;
pub mod proxy;
mod testenv;
mod wait;
mod webhook;

pub use client::{
    CONNECT_TIMEOUT, HOW_TO_START, config_from_file, connect, service_account_token, test_client,
    test_config, token_config,
};
pub use crd::{CRD_ESTABLISHED_TIMEOUT, FIELD_MANAGER, install_crd};
pub use kubectl::kubectl;
pub use namespace::{KEEP_NAMESPACES_ENV, TEST_NAMESPACE_LABEL, TestNamespace, is_not_found};
pub use testenv::{TestEnv, TestEnvOptions, scripts_dir};
pub use wait::{
    MAX_POLL_INTERVAL, MIN_POLL_INTERVAL, WaitTimeout, try_wait_for, wait_for, wait_until,
};
pub use webhook::{free_port, remove_webhook_configurations, webhook_tls};
