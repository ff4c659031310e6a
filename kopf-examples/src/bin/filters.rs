//! # Filters: a daemon only for the objects that ask for it
//!
//! The `monitor` daemon runs only for `KopfExample` objects labelled `monitor=true`. Filters
//! are re-evaluated on every change of the object, so toggling the label stops and restarts
//! the daemon:
//!
//! - label `monitor=true` added: the daemon starts (and the finalizer is added);
//! - label removed or set to anything else: the daemon is stopped with the reason "filters
//!   mismatch" and the finalizer is released (no daemon, no reason to block deletion);
//! - label set back to `true`: a new daemon starts.
//!
//! Each daemon writes `status.monitor = {"running": true, "since": "<seconds since the Unix
//! epoch>"}` when it starts and `{"running": false, "reason": "filters mismatch"}` when it stops.
//!
//! The second handler, `annotated_audit`, shows the other filter forms together: an annotation
//! that must be present, a label predicate (a plain function), a field value and `when`.
//!
//! ## Run it
//!
//! ```text
//! eval "$(tools/kube-testenv/start.sh)"   # or point KUBECONFIG at your cluster
//! cargo run -p kopf-examples --bin filters -- --namespace default --install-crd
//! ```
//!
//! then add and remove the label `monitor=true` on a `KopfExample` and watch the log.

use std::sync::Arc;

use kopf_examples::crd::KopfExample;
use kopf_runtime::{HandlerResult, Patch, Stopper, daemon, timer};
use serde_json::json;
use tracing::info;

/// Runs while the object is labelled `monitor=true`.
#[daemon(labels(monitor = "true"), cancellation_timeout = "10s")]
async fn monitor(_obj: Arc<KopfExample>, stopper: Stopper, patch: Patch) -> HandlerResult {
    info!("monitoring started");
    patch.status("monitor", json!({ "running": true, "since": now() }));
    if let Err(err) = patch.flush().await {
        tracing::warn!(%err, "cannot write status.monitor");
    }
    stopper.stopped().await;
    let reason = stopper.reason().to_string();
    info!(%reason, "monitoring stopped");
    // Applied when the daemon returns — unless the object is already gone.
    patch.status("monitor", json!({ "running": false, "reason": reason }));
    Ok(())
}

/// A team label is "owned" if it names one of the two teams.
fn owned_team(team: Option<&str>) -> bool {
    matches!(team, Some("platform" | "data"))
}

/// Only objects that have items at all.
fn has_items(obj: &KopfExample) -> bool {
    !obj.spec.items.is_empty()
}

/// Every 30 s, for objects that carry the `example.com/audit` annotation, belong to an owned
/// team, have `spec.duration` set, and have items. Returns how many items there are (stored
/// under `status.annotated_audit`).
#[timer(
    interval = "30s",
    annotations("example.com/audit" = present),
    labels(team = owned_team),
    field = "spec.duration",
    when = has_items,
)]
async fn annotated_audit(obj: Arc<KopfExample>) -> HandlerResult<usize> {
    Ok(obj.spec.items.len())
}

fn now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{secs}")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kopf_examples::cli::run().await
}
