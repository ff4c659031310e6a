//! The watch loop of one resource kind: find the kind in API discovery (reporting a missing CRD
//! or a missing permission, and retrying until it appears), then run one watch stream per
//! selected namespace (or one for all) and hand every event to the kind's [`Observer`]. A
//! sharded kind's streams are run by `sharded.rs`, which decides what share they watch.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::StreamExt;
use kube::api::Api;
use kube::core::GroupVersionKind;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::core::resource::ResourceInfo;

use serde_json::Value;

use super::sharded::{self, Known, Sharded};
use crate::operator::health::{KindHealth, WatchPhase, pulse};
use crate::operator::schema;
use crate::operator::watched::Watched;
use crate::operator::write::{Failure, Writer, classify, describe};

/// Which objects of a kind to watch: the namespaces (empty: all) and a label selector.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selection {
    pub(crate) namespaces: Vec<String>,
    pub(crate) label_selector: Option<String>,
}

/// What the watch loop feeds.
pub(crate) trait Observer: Send + Sync + 'static {
    /// The kind is served; whether it has a status subresource.
    fn discovered(&self, status_subresource: bool);
    /// A version of an object (from a list or a watch event), readable or not. Returns its UID,
    /// if it has one.
    fn observe(self: &Arc<Self>, object: Watched) -> Option<Arc<str>>;
    /// An object was deleted or left the label selector (with its last state), or vanished
    /// during a relist (without).
    fn forget(self: &Arc<Self>, uid: &Arc<str>, last: Option<&Value>);
    /// An object left this member's share of a sharded group: another member serves it now.
    fn release(self: &Arc<Self>, uid: &Arc<str>);
    /// One of the kind's streams has listed for the first time.
    fn listed(&self);
}

/// Serves one kind until the kind's stop token is cancelled.
///
/// # Cancellation safety
/// Meant to run in its own task; cancelling it (through the kind's stop token or by dropping)
/// leaves nothing half-done.
pub(crate) async fn serve<O: Observer>(
    observer: Arc<O>,
    writer: Writer,
    selection: Selection,
    health: Arc<KindHealth>,
    checks: schema::Checks,
    sharded: Option<Sharded>,
    stop: CancellationToken,
) {
    let Some(()) = stop
        .run_until_cancelled(discover(&*observer, &writer, &health))
        .await
    else {
        return;
    };
    schema::check(&writer.client, &writer.info, &checks).await;
    health.set_phase(WatchPhase::Listing);
    // The API server ends each watch within the idle bound, so a silence longer than that is a
    // dead connection (see `health::pulse`); bookmarks (on by default) keep the resourceVersion
    // of a quiet watch fresh.
    let mut config = watcher::Config::default().timeout(health.watch_limits().server_timeout());
    if let Some(selector) = &selection.label_selector {
        config = config.labels(selector);
    }
    let namespaces: Vec<String> = if writer.info.namespaced && !selection.namespaces.is_empty() {
        selection.namespaces.clone()
    } else {
        vec![String::new()]
    };
    // One stream per namespace, each through a client of its own that reports to its pulse.
    let streams = |client: &kube::Client, known: Vec<Known>, stop: &CancellationToken| {
        let streams = namespaces.iter().zip(known).map(|(ns, known)| {
            let client = pulse::observed(client, health.pulse());
            let stream = Stream {
                observer: observer.clone(),
                resource: writer.info.to_string(),
                health: health.clone(),
                ns: ns.clone(),
                stop: stop.clone(),
            };
            stream.watch(shard_api(&client, &writer, ns), config.clone(), known)
        });
        futures::future::join_all(streams)
    };
    let Some(sharded) = sharded else {
        let known = vec![Known::default(); namespaces.len()];
        streams(&writer.client, known, &stop).await;
        return;
    };
    sharded::serve(sharded, &writer, namespaces.len(), streams, &stop).await;
}

/// The API of a kind's objects in `ns` (empty: all namespaces) through `client`.
fn shard_api(client: &kube::Client, writer: &Writer, ns: &str) -> Api<Watched> {
    if ns.is_empty() {
        Api::all_with(client.clone(), &*writer.resource)
    } else {
        Api::namespaced_with(client.clone(), ns, &*writer.resource)
    }
}

/// Looks the kind up until the API server serves it; records whether it has a status
/// subresource.
async fn discover(observer: &impl Observer, writer: &Writer, health: &KindHealth) {
    let status = await_served(&writer.client, &writer.info, health).await;
    observer.discovered(status);
}

/// Looks a kind up in API discovery until the API server serves it, the kind's health
/// `Unavailable` meanwhile (a missing CRD or permission logged, naming the kind). Returns
/// whether it has a status subresource. The children's and related objects' watches wait for
/// their kinds the same way (`relations.rs`).
pub(super) async fn await_served(
    client: &kube::Client,
    info: &ResourceInfo,
    health: &KindHealth,
) -> bool {
    let gvk = GroupVersionKind::gvk(&info.group, &info.version, &info.kind);
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
        .with_jitter()
        .build();
    let mut reported = None;
    loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((_, caps)) => {
                if reported.is_some() {
                    info!(resource = %info, "the resource is served now; starting to watch it");
                }
                return caps.subresources.iter().any(|(r, _)| r.plural == "status");
            }
            Err(err) => {
                let failure = classify(&err);
                if reported != Some(failure) {
                    health.set_phase(WatchPhase::Unavailable);
                    report_unavailable(info, failure, &err);
                    reported = Some(failure);
                }
            }
        }
        tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(5))).await;
    }
}

fn report_unavailable(info: &ResourceInfo, failure: Failure, err: &kube::Error) {
    match failure {
        Failure::NotFound => error!(resource = %info, kind = %info.kind,
            "the resource {info} is not installed on the API server (is its CRD applied?); \
             its handlers wait and the operator serves the other resources"),
        Failure::Forbidden => error!(resource = %info, error = %describe(err),
            "the operator is not permitted to discover {info}; its handlers wait"),
        _ => warn!(resource = %info, error = %describe(err), "cannot discover {info}; retrying"),
    }
}

/// One watch stream of a kind (all namespaces or one).
struct Stream<O> {
    observer: Arc<O>,
    /// The kind, for logs.
    resource: String,
    health: Arc<KindHealth>,
    ns: String,
    stop: CancellationToken,
}

impl<O: Observer> Stream<O> {
    /// Watches until stopped; relists are diffed by UID so that objects that vanished while the
    /// watch was down are forgotten.
    async fn watch(self, api: Api<Watched>, config: watcher::Config, known: Known) -> Known {
        let Self {
            observer,
            resource,
            health,
            ns,
            stop,
        } = self;
        let Known {
            uids: mut known,
            ranges,
        } = known;
        let mut relist: Option<HashSet<Arc<str>>> = None;
        let mut listed = false;
        let mut last_error: Option<String> = None;
        let stream = watcher::watcher(api, config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        loop {
            let next = tokio::select! {
                () = stop.cancelled() => return Known { uids: known, ranges },
                next = stream.next() => next,
            };
            let event = match next {
                Some(Ok(event)) => event,
                Some(Err(err)) => {
                    let cause = report_watch_error(&resource, &ns, &err, &mut last_error);
                    health.watch_failed(cause);
                    continue;
                }
                None => {
                    health.mark_dead();
                    error!(resource = %resource, namespace = %ns, "the watch stream ended");
                    return Known {
                        uids: known,
                        ranges,
                    };
                }
            };
            // Recovered only once the watch delivers again (`Init` only starts a relist).
            if !matches!(event, Event::Init) && last_error.take().is_some() {
                info!(resource = %resource, namespace = %ns, "the watch has recovered");
            }
            match event {
                Event::Init => {
                    if listed {
                        health.relisted();
                    }
                    relist = Some(HashSet::new());
                }
                Event::InitApply(obj) => {
                    if let Some(uid) = observer.observe(obj) {
                        relist.get_or_insert_with(HashSet::new).insert(uid);
                    }
                }
                Event::InitDone => {
                    let seen = relist.take().unwrap_or_default();
                    for uid in known.difference(&seen) {
                        if ranges.as_ref().is_some_and(|r| !r.covers(uid)) {
                            observer.release(uid);
                            continue;
                        }
                        debug!(resource = %resource, uid = %uid, "the object vanished while the watch was down");
                        observer.forget(uid, None);
                    }
                    known = seen;
                    if !listed {
                        listed = true;
                        observer.listed();
                        health.list_done();
                    }
                }
                Event::Apply(obj) => {
                    if let Some(uid) = observer.observe(obj) {
                        known.insert(uid);
                    }
                }
                Event::Delete(obj) => {
                    if let Some(uid) = obj.meta().uid.as_deref() {
                        let uid: Arc<str> = uid.into();
                        known.remove(&uid);
                        observer.forget(&uid, Some(&obj.metadata_body()));
                    }
                }
            }
        }
    }
}

/// Logs a failed watch stream; returns what it failed with, unless it merely expired.
fn report_watch_error(
    resource: &str,
    ns: &str,
    err: &watcher::Error,
    last: &mut Option<String>,
) -> Option<String> {
    if let watcher::Error::WatchError(status) = err
        && status.code == 410
    {
        // The resource version expired (routine after long quiet periods): the watcher relists.
        debug!(resource = %resource, namespace = %ns, "the watch expired; relisting");
        return None;
    }
    let inner = match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => Some(e),
        _ => None,
    };
    let message = match inner {
        Some(e) => match classify(e) {
            Failure::NotFound => format!("{resource} is not served (was its CRD removed?)"),
            Failure::Forbidden => {
                format!("not permitted to list/watch {resource}: {}", describe(e))
            }
            _ => describe(e),
        },
        None => err.to_string(),
    };
    // Log each new kind of failure at error level, repeats at debug (the stream retries with backoff).
    if last.as_deref() == Some(&message) {
        debug!(resource = %resource, namespace = %ns, error = %message, "the watch failed again; retrying");
    } else {
        error!(resource = %resource, namespace = %ns, error = %message, "the watch failed; retrying with backoff");
        *last = Some(message.clone());
    }
    Some(message)
}
