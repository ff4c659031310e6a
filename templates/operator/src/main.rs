//! Runs the operator: every handler of the library (those of `operator::handlers`, with the
//! `reconcile` feature that of `operator::reconcile`, and with the `webhook` feature the webhook
//! server of `operator::webhook`'s admission handler), until SIGINT or SIGTERM, then a
//! graceful stop (every daemon is asked to stop; the finalizers stay, so the daemons resume
//! when the operator starts again).
//!
//! The settings come from the command line or the environment (the Deployment in `deploy/`
//! sets the environment): kopf-runtime's `OperatorArgs`. `--help` lists them all;
//! the main ones:
//!
//! | flag | variable | meaning | default |
//! | --- | --- | --- | --- |
//! | `--namespace` | `KOPF_NAMESPACE` | watch only these namespaces (comma-separated) | all namespaces |
//! | `--health` | `KOPF_HEALTH` | serve `/healthz`, `/readyz` and `/metrics` on this address, e.g. `0.0.0.0:8080` | no probes |
//! | `--no-metrics` | `KOPF_NO_METRICS` | collect no metrics (`/metrics` answers 404) | metrics on |
//! | `--leader-election` | `KOPF_LEADER_ELECTION` | `NAMESPACE/NAME` of a Lease: run as one of several replicas | a single replica |
//! | `--log-format` | `KOPF_LOG_FORMAT` | `human` or `json` | `human` |
//! | `--log-level` | `KOPF_LOG_LEVEL` | the operator's log level (`RUST_LOG` wins if set) | `info` |
//! | `--identity` | `POD_NAME` | this replica, in its Events and in the Lease | the host name |
//! | `--shutdown-timeout` | `KOPF_SHUTDOWN_TIMEOUT` | how long a graceful stop may take; keep it below the Deployment's `terminationGracePeriodSeconds` (30 s) | `25s` |
//!
//! `--help` shows kopf-runtime's defaults, which are what this `main` runs with: it sets no
//! option on the builder that a flag also sets. If you set one (say `.shutdown_timeout(..)`
//! before `.args(..)`), the flag still wins, but `--help` no longer shows the effective default:
//! note it in this table.

use kopf_runtime::{Operator, OperatorArgs};
// The handlers register themselves when they are linked in; this links them.
use operator as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // A wrong flag or variable: a clear error and exit code 2.
    let args = OperatorArgs::parse();
    let builder = Operator::builder()
        // The finalizer (kopf.dev/<name>) and the field manager: the package's name, whatever
        // the binary is called.
        .name(env!("CARGO_PKG_NAME"))
        .args(&args);
    // The `webhook` feature: the webhook server of `operator::webhook`'s admission handler.
    #[cfg(feature = "webhook")]
    let builder = builder.webhooks(operator::webhook::webhooks());
    builder.run().await?;
    Ok(())
}
