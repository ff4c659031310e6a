//! The watch of a sharded kind: how its streams get the member's share. With the API server's
//! `shardSelector` (checked once per kind, see `selector.rs`), one round of
//! streams runs per set of ranges and is restarted, with a fresh list, only when the ranges
//! change; otherwise (client-side) the streams watch every object and the kind serves only its
//! share.
//!
//! ```text
//!  resolve mode ──client-side──▶ plain streams until stopped
//!       │ server
//!       ▼
//!  wait for ranges ──▶ streams with shardSelector(ranges) ──▶ other ranges? cancel the round,
//!       ▲                                                      keep what the streams knew
//!       └──────────────────────────────────────────────────────┘
//! ```

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::selector;
use crate::operator::ha::ranges::RangeSet;
use crate::operator::ha::sharding::ShardWatch;
use crate::operator::scope::Scope;
use crate::operator::write::Writer;

/// A sharded kind's watch: the mode asked for, where the mode used is recorded, and the
/// scope the kind serves (its ranges go into the watches' `shardSelector` in server mode).
#[derive(Debug, Clone)]
pub(crate) struct Sharded {
    pub(crate) mode: ShardWatch,
    pub(crate) used: Arc<OnceLock<ShardWatch>>,
    pub(crate) scope: tokio::sync::watch::Receiver<Scope>,
}

/// What one stream knows between restarts: the UIDs it has seen, and the ranges it watches (a
/// sharded kind with the server-side selector; an object that vanishes from a relist outside
/// them left the share rather than the cluster).
#[derive(Debug, Clone, Default)]
pub(super) struct Known {
    pub(super) uids: HashSet<Arc<str>>,
    pub(super) ranges: Option<Arc<RangeSet>>,
}

/// Runs the streams of a sharded kind (`streams` starts one round of them through a client,
/// from what each knew, until the token is cancelled) until `stop`.
///
/// # Cancellation safety
/// Meant to run in the kind's watch task; cancelling it leaves nothing half-done.
pub(super) async fn serve<S, F>(
    sharded: Sharded,
    writer: &Writer,
    streams_count: usize,
    streams: S,
    stop: &CancellationToken,
) where
    S: Fn(&kube::Client, Vec<Known>, &CancellationToken) -> F,
    F: Future<Output = Vec<Known>>,
{
    let mode =
        selector::resolve(sharded.mode, &writer.client, &writer.resource, &writer.info).await;
    let _first = sharded.used.set(mode);
    if mode != ShardWatch::Server {
        let known = vec![Known::default(); streams_count];
        streams(&writer.client, known, stop).await;
        return;
    }
    // Server-side: one round of streams per set of ranges, restarted (with a fresh list) when
    // the ranges change.
    let mut scopes = sharded.scope;
    let mut known = vec![Known::default(); streams_count];
    let mut current: Option<Arc<RangeSet>> = None;
    loop {
        let Some(ranges) = other_ranges(&mut scopes, current.as_ref(), stop).await else {
            return;
        };
        let Some(client) = selector::watch_client(&writer.client, &ranges) else {
            continue;
        };
        debug!(resource = %writer.info, ranges = %ranges, "watching this member's ranges");
        for k in &mut known {
            k.ranges = Some(ranges.clone());
        }
        current = Some(ranges);
        let round = stop.child_token();
        let mut running = std::pin::pin!(streams(&client, std::mem::take(&mut known), &round));
        // The streams go on while the member serves nothing (a lapse) or the same ranges
        // again; only other ranges start a fresh list.
        let moved = other_ranges(&mut scopes, current.as_ref(), stop);
        known = tokio::select! {
            known = &mut running => known,
            _ = moved => {
                round.cancel();
                running.await
            }
        };
        if stop.is_cancelled() {
            return;
        }
        current = None; // nothing watches now: the next ranges, even the same, start a round
    }
}

/// Waits until the kind serves ranges other than `current` (at once if it does already);
/// `None` when stopped.
async fn other_ranges(
    scopes: &mut tokio::sync::watch::Receiver<Scope>,
    current: Option<&Arc<RangeSet>>,
    stop: &CancellationToken,
) -> Option<Arc<RangeSet>> {
    loop {
        if let Scope::Ranges(ranges) = &*scopes.borrow_and_update()
            && current != Some(ranges)
        {
            return Some(ranges.clone());
        }
        tokio::select! {
            () = stop.cancelled() => return None,
            changed = scopes.changed() => changed.ok()?,
        }
    }
}
