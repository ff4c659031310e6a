//! # Daemons and timers: the four basic shapes
//!
//! The kopf-rs version of the examples from kopf's daemon and timer release, on `KopfExample`
//! objects:
//!
//! - `pinger`: an **async daemon** that pings every few seconds and does not check any stop
//!   flag: it relies on being cancelled. `cancellation_backoff = "1s"` gives it one second of
//!   grace after the stop request; then it is dropped at its next `.await`.
//! - `blocking_worker`: a **blocking daemon** (a plain `fn`, run on its own thread). Like kopf's
//!   example, its first attempts fail with a temporary error (retried in the same daemon after
//!   1 s, writing `status.worker.failures` before failing); then it loops on its stop flag with
//!   `stopper.wait(..)` and writes its progress into `status.worker.rounds` with
//!   `patch.flush_blocking()`, without exiting.
//! - `sharp_tick`: a **sharp timer** every 3 s on a fixed grid, which only runs once the object
//!   has been unchanged for 5 s (`idle`).
//! - `idle_refresh`: an **async timer** with `idle = "10s"` and `interval = "4s"`: after 10 s
//!   without changes it runs every 4 s; any change of the object (not of its status) makes it
//!   wait the 10 s again. Its result is stored under `status.idle_refresh`.
//!
//! ## Run it
//!
//! ```text
//! eval "$(tools/kube-testenv/start.sh)"   # or point KUBECONFIG at your cluster
//! cargo run -p kopf-examples --bin daemons_and_timers -- --namespace default --install-crd
//! ```
//!
//! then create a `KopfExample` in `default` and watch the log; delete the object and watch the
//! daemons stop (`scripts/demo` shows the same with a scripted scenario).

use std::sync::Arc;
use std::time::Duration;

use kopf_examples::crd::KopfExample;
use kopf_runtime::{HandlerError, HandlerResult, Patch, Retry, Stopper, daemon, timer};
use serde_json::{Value, json};
use tracing::info;

/// Pings every 2 s until it is cancelled: no stop flag in sight. When the object is deleted (or
/// the operator exits), the framework asks it to stop, waits `cancellation_backoff`, then
/// cancels it, and within `cancellation_timeout` it must be gone.
#[daemon(cancellation_backoff = "1s", cancellation_timeout = "5s")]
async fn pinger(obj: Arc<KopfExample>) {
    let mut pings = 0_u64;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        pings += 1;
        info!(pings, field = ?obj.spec.field, "ping");
    }
}

/// How many attempts of the blocking daemon fail before it settles.
const WARM_UP_FAILURES: u32 = 2;

/// A blocking daemon: runs on its own thread, fails its first attempts, then checks its stop
/// flag every 2 s and reports its progress in `status.worker` while it runs.
#[daemon(backoff = "3s", retries = 5)]
#[allow(clippy::needless_pass_by_value)] // handler parameters are injected by value
fn blocking_worker(
    obj: Arc<KopfExample>,
    stopper: Stopper,
    patch: Patch,
    retry: Retry,
) -> HandlerResult {
    info!(
        retry = retry.0,
        items = obj.spec.items.len(),
        "worker started"
    );
    if retry.0 < WARM_UP_FAILURES {
        // A failed attempt's pending patch is dropped: flush what must survive the failure.
        patch.status("worker", json!({ "failures": retry.0 + 1 }));
        patch.flush_blocking()?;
        return Err(HandlerError::temporary(
            "warming up",
            Duration::from_secs(1),
        ));
    }
    let mut rounds = 0_u64;
    while !stopper.wait(Duration::from_secs(2)) {
        rounds += 1;
        if rounds.is_multiple_of(5) {
            patch.status("worker", json!({ "rounds": rounds }));
            // Applies the status now; the daemon keeps running.
            if let Err(err) = patch.flush_blocking() {
                tracing::warn!(%err, "cannot report progress; retrying with the next flush");
            }
        }
    }
    info!(rounds, reason = %stopper.reason(), "worker stopped");
    Ok(())
}

/// A sharp timer: every 3 s on a fixed grid, once the object has been unchanged for 5 s.
#[timer(interval = "3s", sharp, idle = "5s")]
async fn sharp_tick(obj: Arc<KopfExample>) {
    info!(name = ?obj.metadata.name, "sharp tick");
}

/// An idle timer with an interval: stores the number of items under `status.idle_refresh`.
#[timer(idle = "10s", interval = "4s")]
async fn idle_refresh(obj: Arc<KopfExample>) -> HandlerResult<Value> {
    info!("refreshing after 10 s of quiet");
    Ok(json!({ "items": obj.spec.items.len() }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kopf_examples::cli::run().await
}
