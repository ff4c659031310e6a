//! The operator's handlers: a daemon and a timer per `Backup`. Each registers itself; `main`
//! runs them all, and the tests call them at every level.

use std::sync::Arc;
use std::time::Duration;

use kopf_runtime::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::crd::Backup;

/// How often [`watch_bucket`] looks at its bucket.
pub const CHECK_EVERY: Duration = Duration::from_secs(30);

/// A daemon: one per `Backup`, for as long as the object exists. It announces the bucket it
/// watches with an Event (`kubectl describe backup NAME` shows it), and again whenever the spec
/// names another one; it looks at the bucket every [`CHECK_EVERY`] until it is asked to stop:
/// when the object is deleted (the object's finalizer keeps it until the daemon has returned)
/// or when the operator exits.
///
/// It takes the object as `Live<Backup>`, its latest version: a daemon runs for as long as the
/// object exists, and an `Arc<Backup>` would stay the object as it was when the daemon started.
#[daemon(cancellation_timeout = "10s")]
pub async fn watch_bucket(
    mut backup: Live<Backup>,
    stopper: Stopper,
    events: Events,
) -> HandlerResult {
    let mut bucket = backup.get().spec.bucket.clone();
    announce(&events, &bucket).await;
    let mut checks = 0_u64;
    let mut next_check = Instant::now() + CHECK_EVERY;
    loop {
        tokio::select! {
            // Checked first: a stop wins over a check or a change that is due at the same time.
            biased;
            () = stopper.stopped() => break,
            latest = backup.changed() => {
                // No more versions will come: the daemon is being stopped.
                let Some(latest) = latest else { break };
                // Any change wakes the daemon (the timer's status too): act on the bucket's.
                if latest.spec.bucket != bucket {
                    bucket.clone_from(&latest.spec.bucket);
                    announce(&events, &bucket).await;
                }
            }
            () = tokio::time::sleep_until(next_check) => {
                checks += 1;
                tracing::info!(%bucket, checks, "the bucket is there");
                next_check += CHECK_EVERY;
            }
        }
    }
    tracing::info!(reason = %stopper.reason(), checks, "stopped watching");
    Ok(())
}

/// The `Watching` Event of [`watch_bucket`]. An Event that cannot be posted is logged, and the
/// daemon goes on.
async fn announce(events: &Events, bucket: &str) {
    let note = format!("watching the bucket {bucket}");
    if let Err(err) = events.info("Watching", note).await {
        tracing::warn!(error = %err, "could not post the Watching event");
    }
}

/// What [`back_up`] stores under `status.back_up` after each run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Copied {
    /// Where the items went.
    pub bucket: String,
    /// How many items were copied.
    pub items: usize,
}

/// How long [`back_up`] waits before it tries a `Backup` without a bucket again.
pub const RETRY_UNCONFIGURED: Duration = Duration::from_secs(60);

/// A timer: every minute per `Backup`, never overlapping itself. Its result is stored under
/// `status.back_up` (`kubectl get backups` shows it). A failure is reported as a
/// `HandlerFailed` Warning Event about the object (`kubectl describe` shows it) and retried:
/// an arbitrary error (`?`) after the backoff, a temporary one after its own delay. (A
/// permanent error would stop the timer for the object until the operator restarts.)
#[timer(interval = "1m", backoff = "10s")]
pub async fn back_up(backup: Arc<Backup>) -> HandlerResult<Copied> {
    let spec = &backup.spec;
    if spec.bucket.is_empty() {
        // Wrong until someone edits the object: try again (with the object as it is then) later.
        return Err(HandlerError::temporary(
            "spec.bucket is empty: there is nowhere to copy to",
            RETRY_UNCONFIGURED,
        ));
    }
    // Your work goes here; this template only counts the items.
    tracing::info!(bucket = %spec.bucket, items = spec.items.len(), "copied");
    Ok(Copied {
        bucket: spec.bucket.clone(),
        items: spec.items.len(),
    })
}
