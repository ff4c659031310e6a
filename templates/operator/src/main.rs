//! Runs the operator: every handler of `operator::handlers`, until SIGINT or SIGTERM, then a
//! graceful stop (every daemon is asked to stop; the finalizers stay, so the daemons resume
//! when the operator starts again).
//!
//! The settings come from the environment (the Deployment in `deploy/` sets them). This is
//! deliberately small: it moves to kopf-runtime's command line for operators once there is one.
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `KOPF_NAMESPACE` | watch only these namespaces (comma-separated) | all namespaces |
//! | `KOPF_HEALTH` | serve `/healthz` and `/readyz` on this address, e.g. `0.0.0.0:8080` | no probes |
//! | `KOPF_LEADER_ELECTION` | `NAMESPACE/NAME` of a Lease: run as one of several replicas | a single replica |
//! | `KOPF_LOG_FORMAT` | `human` or `json` | `human` |
//! | `RUST_LOG` | the log filter | `info` |
//! | `POD_NAME` | this replica, in its Events and in the Lease | the host name |

use std::time::Duration;

use anyhow::{Context as _, bail};
use kopf_runtime::{LeaderElection, LogFormat, Operator, OperatorBuilder};
// The handlers register themselves when they are linked in; this links them.
use operator as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    builder_from_env()?.run().await?;
    Ok(())
}

/// The operator with the settings from the environment (see the module docs).
fn builder_from_env() -> anyhow::Result<OperatorBuilder> {
    let format = match env("KOPF_LOG_FORMAT").as_deref() {
        None | Some("human") => LogFormat::Human,
        Some("json") => LogFormat::Json,
        Some(other) => bail!("KOPF_LOG_FORMAT is `{other}`; it takes `human` or `json`"),
    };
    let mut builder = Operator::builder()
        // The finalizer (kopf.dev/<name>) and the field manager: the package's name, whatever
        // the binary is called.
        .name(env!("CARGO_PKG_NAME"))
        // Below the Deployment's terminationGracePeriodSeconds (30 s).
        .shutdown_timeout(Duration::from_secs(20))
        .log_format(format);
    if let Some(namespaces) = env("KOPF_NAMESPACE") {
        let namespaces: Vec<String> = namespaces
            .split(',')
            .map(str::trim)
            .filter(|ns| !ns.is_empty())
            .map(str::to_owned)
            .collect();
        builder = builder.namespaces(namespaces);
    }
    if let Some(addr) = env("KOPF_HEALTH") {
        let addr = addr.parse().with_context(|| {
            format!("KOPF_HEALTH is `{addr}`, not an address like 0.0.0.0:8080")
        })?;
        builder = builder.health_addr(addr);
    }
    if let Some(lease) = env("KOPF_LEADER_ELECTION") {
        let parsed = lease.split_once('/').filter(|(namespace, name)| {
            !namespace.is_empty() && !name.is_empty() && !name.contains('/')
        });
        let Some((namespace, name)) = parsed else {
            bail!("KOPF_LEADER_ELECTION is `{lease}`; it takes NAMESPACE/NAME (of a Lease)");
        };
        builder = builder.leader_election(LeaderElection::new(name, namespace));
    }
    Ok(builder)
}

/// A variable of the environment, if it is set and not empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}
