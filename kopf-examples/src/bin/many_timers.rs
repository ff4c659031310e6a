//! # A timer for thousands of objects, without a thundering herd
//!
//! `refresh_many` runs every 60 s for every `KopfExample`. With thousands of objects, a plain
//! interval timer fires for all of them at once after every operator start (kopf#1196), and the
//! herd never disperses. Two options spread the load:
//!
//! - `initial_delay = spread`: a **function of the object** that gives each object a stable
//!   offset in `[0 s, 60 s)` derived from its UID, so the first runs — and with them the whole
//!   schedule — are spread evenly over the interval, and stay put across restarts;
//! - `jitter = "5s"`: a random extra delay of up to 5 s before **every** run, so objects whose
//!   offsets are close do not stay in lock-step.
//!
//! `main` also caps the handler invocations running at once (`max_concurrent_handlers`) and
//! the client's request rate (`max_requests_per_second`), so a burst cannot overload the API
//! server.
//!
//! ## Run it
//!
//! ```text
//! eval "$(tools/kube-testenv/start.sh)"   # or point KUBECONFIG at your cluster
//! cargo run --release -p kopf-examples --bin many_timers -- --namespace default --install-crd
//! ```
//!
//! then create a few thousand `KopfExample` objects; every object gets `status.refresh_many`
//! about once a minute, and the writes arrive at an even rate.

use std::sync::Arc;
use std::time::Duration;

use kopf_examples::crd::KopfExample;
use kopf_runtime::{HandlerResult, timer};
use serde_json::{Value, json};

/// The timer's interval, in milliseconds (the spread of the first runs).
const INTERVAL_MS: u64 = 60_000;

/// A stable offset in `[0, INTERVAL)` per object: FNV-1a of its UID.
fn spread(obj: &KopfExample) -> Duration {
    let uid = obj.metadata.uid.as_deref().unwrap_or_default();
    let hash = uid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    Duration::from_millis(hash % INTERVAL_MS)
}

/// Runs every 60 s (+ up to 5 s of jitter) per object, first after the object's own offset.
#[timer(interval = "60s", jitter = "5s", initial_delay = spread, timeout = "50s")]
async fn refresh_many(obj: Arc<KopfExample>) -> HandlerResult<Value> {
    tracing::debug!("refreshing");
    Ok(json!({ "items": obj.spec.items.len() }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = kopf_examples::cli::ExampleArgs::from_env();
    if args.install_crd {
        kopf_examples::cli::install_crds().await?;
    }
    args.builder()
        .max_concurrent_handlers(64)
        .max_requests_per_second(100)
        .run()
        .await?;
    Ok(())
}
