//! The demo operator's handlers. Each logs one line per event with a `demo` field naming the
//! event (`daemon-started`, `heartbeat`, `daemon-stopped`, `timer-fired`, `idle-fired`) and an
//! `object` field, which the scenario reads from the operator's JSON log.

use std::sync::Arc;
use std::time::Duration;

use kopf_examples::crd::KopfExample;
use kopf_runtime::{HandlerResult, ObjectRef, Patch, Stopper, daemon, timer};
use serde_json::{Value, json};
use tracing::{info, warn};

/// How often the daemon beats.
pub(crate) const BEAT: Duration = Duration::from_secs(2);
/// The `quiet` timer's idle time.
pub(crate) const IDLE: Duration = Duration::from_secs(6);

/// One daemon per object: beats every 2 s and, every third beat, writes the count into
/// `status.heartbeat` without exiting. Stops gracefully on its stop flag.
#[daemon(cancellation_backoff = "2s", cancellation_timeout = "5s")]
async fn heartbeat(
    _obj: Arc<KopfExample>,
    object: ObjectRef,
    stopper: Stopper,
    patch: Patch,
) -> HandlerResult {
    info!(demo = "daemon-started", object = %object.name, "daemon started");
    let mut beats = 0_u64;
    while !stopper.sleep(BEAT).await {
        beats += 1;
        info!(demo = "heartbeat", object = %object.name, beats, "heartbeat");
        if beats.is_multiple_of(3) {
            patch.status("heartbeat", json!({ "beats": beats }));
            if let Err(err) = patch.flush().await {
                warn!(%err, "cannot write status.heartbeat yet");
            }
        }
    }
    let reason = stopper.reason();
    info!(demo = "daemon-stopped", object = %object.name, %reason, beats, "daemon stopped");
    Ok(())
}

/// A sharp timer every 3 s; its result goes to `status.tick`.
#[timer(interval = "3s", sharp)]
async fn tick(obj: Arc<KopfExample>, object: ObjectRef) -> HandlerResult<Value> {
    info!(demo = "timer-fired", object = %object.name, "timer fired");
    Ok(json!({ "items": obj.spec.items.len() }))
}

/// Fires once the object has been unchanged for 6 s, then waits for the next change (and 6 s of
/// quiet after it). Status writes do not count as changes.
#[timer(idle = "6s")]
async fn quiet(obj: Arc<KopfExample>, object: ObjectRef) -> HandlerResult<Value> {
    let field = obj.spec.field.clone().unwrap_or_default();
    info!(demo = "idle-fired", object = %object.name, %field, "unchanged for 6 s");
    Ok(json!({ "field": field }))
}
