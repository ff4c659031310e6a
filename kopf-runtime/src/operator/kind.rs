//! Serving one resource kind: find it in API discovery (reporting a missing CRD or a missing
//! permission, and retrying until it appears), then run one watch stream per scope (all
//! namespaces, or each given namespace) and feed the events to the kind's state.

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

use super::api::{Failure, classify, describe};
use super::health::{KindHealth, WatchPhase};
use super::objects::KindState;
use super::schema;
use super::watched::Watched;

/// What to watch of a kind: the namespaces (empty: all) and a label selector.
#[derive(Debug, Clone, Default)]
pub(crate) struct WatchScope {
    pub(crate) namespaces: Vec<String>,
    pub(crate) label_selector: Option<String>,
}

/// Serves one kind until the kind's stop token is cancelled.
///
/// # Cancellation safety
/// Meant to run in its own task; cancelling it (through the kind's stop token or by dropping)
/// leaves nothing half-done.
pub(crate) async fn serve(
    state: Arc<KindState>,
    scope: WatchScope,
    health: Arc<KindHealth>,
    ids: Vec<&'static str>,
    stop: CancellationToken,
) {
    let Some(()) = stop.run_until_cancelled(discover(&state, &health)).await else {
        return;
    };
    schema::warn_if_pruned(&state.writer.client, &state.info, &ids).await;
    health.set_phase(WatchPhase::Listing);
    let mut config = watcher::Config::default();
    if let Some(selector) = &scope.label_selector {
        config = config.labels(selector);
    }
    let apis: Vec<(String, Api<Watched>)> = if state.info.namespaced && !scope.namespaces.is_empty()
    {
        let client = &state.writer.client;
        scope
            .namespaces
            .iter()
            .map(|ns| {
                (
                    ns.clone(),
                    Api::namespaced_with(client.clone(), ns, &*state.writer.resource),
                )
            })
            .collect()
    } else {
        vec![(
            String::new(),
            Api::all_with(state.writer.client.clone(), &*state.writer.resource),
        )]
    };
    let streams = apis.into_iter().map(|(ns, api)| {
        let stream = Stream {
            state: state.clone(),
            health: health.clone(),
            ns,
            stop: stop.clone(),
        };
        stream.watch(api, config.clone())
    });
    let resync = state.resync_deferred();
    tokio::select! {
        _ = futures::future::join_all(streams) => {}
        () = resync => {}
    }
}

/// Looks the kind up until the API server serves it; records whether it has a status
/// subresource.
async fn discover(state: &KindState, health: &KindHealth) {
    let info = &state.info;
    let gvk = GroupVersionKind::gvk(&info.group, &info.version, &info.kind);
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
        .with_jitter()
        .build();
    let mut reported = None;
    loop {
        match kube::discovery::pinned_kind(&state.writer.client, &gvk).await {
            Ok((_, caps)) => {
                let status = caps.subresources.iter().any(|(r, _)| r.plural == "status");
                state.sink.status.set(status);
                if reported.is_some() {
                    info!(resource = %info, "the resource is served now; starting to watch it");
                }
                return;
            }
            Err(err) => {
                let failure = classify(&err);
                if reported != Some(failure) {
                    health.set_phase(WatchPhase::Unavailable);
                    report_unavailable(state, failure, &err);
                    reported = Some(failure);
                }
            }
        }
        tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(5))).await;
    }
}

fn report_unavailable(state: &KindState, failure: Failure, err: &kube::Error) {
    let info = &state.info;
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
struct Stream {
    state: Arc<KindState>,
    health: Arc<KindHealth>,
    ns: String,
    stop: CancellationToken,
}

impl Stream {
    /// Watches until stopped; relists are diffed by UID so that objects that vanished while the
    /// watch was down are forgotten.
    async fn watch(self, api: Api<Watched>, config: watcher::Config) {
        let Self {
            state,
            health,
            ns,
            stop,
        } = self;
        let mut known: HashSet<Arc<str>> = HashSet::new();
        let mut relist: Option<HashSet<Arc<str>>> = None;
        let mut listed = false;
        let mut last_error: Option<String> = None;
        let stream = watcher::watcher(api, config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        loop {
            let next = tokio::select! {
                () = stop.cancelled() => return,
                next = stream.next() => next,
            };
            let event = match next {
                Some(Ok(event)) => event,
                Some(Err(err)) => {
                    report_watch_error(&state, &ns, &err, &mut last_error);
                    continue;
                }
                None => {
                    health.mark_dead();
                    error!(resource = %state.info, namespace = %ns, "the watch stream ended");
                    return;
                }
            };
            // Recovered only once the watch delivers again (`Init` only starts a relist).
            if !matches!(event, Event::Init) && last_error.take().is_some() {
                info!(resource = %state.info, namespace = %ns, "the watch has recovered");
            }
            match event {
                Event::Init => relist = Some(HashSet::new()),
                Event::InitApply(obj) => {
                    if let Some(uid) = apply(&state, obj) {
                        relist.get_or_insert_with(HashSet::new).insert(uid);
                    }
                }
                Event::InitDone => {
                    let seen = relist.take().unwrap_or_default();
                    for uid in known.difference(&seen) {
                        debug!(resource = %state.info, uid = %uid, "the object vanished while the watch was down");
                        state.forget(uid, None);
                    }
                    known = seen;
                    if !listed {
                        listed = true;
                        health.list_done();
                    }
                }
                Event::Apply(obj) => {
                    if let Some(uid) = apply(&state, obj) {
                        known.insert(uid);
                    }
                }
                Event::Delete(obj) => {
                    if let Some(uid) = obj.meta().uid.as_deref() {
                        let uid: Arc<str> = uid.into();
                        known.remove(&uid);
                        state.forget(&uid, Some(&obj.metadata_body()));
                    }
                }
            }
        }
    }
}

fn apply(state: &Arc<KindState>, obj: Watched) -> Option<Arc<str>> {
    match obj.body {
        Ok(body) => state.observe(body),
        Err(ref reason) => state.unusable(&obj, reason),
    }
}

fn report_watch_error(
    state: &KindState,
    ns: &str,
    err: &watcher::Error,
    last: &mut Option<String>,
) {
    if let watcher::Error::WatchError(status) = err
        && status.code == 410
    {
        // The resource version expired (routine after long quiet periods): the watcher relists.
        debug!(resource = %state.info, namespace = %ns, "the watch expired; relisting");
        return;
    }
    let inner = match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => Some(e),
        _ => None,
    };
    let message = match inner {
        Some(e) => match classify(e) {
            Failure::NotFound => format!("{} is not served (was its CRD removed?)", state.info),
            Failure::Forbidden => format!(
                "not permitted to list/watch {}: {}",
                state.info,
                describe(e)
            ),
            _ => describe(e),
        },
        None => err.to_string(),
    };
    // Log each new kind of failure at error level, repeats at debug (the stream retries with backoff).
    if last.as_deref() == Some(&message) {
        debug!(resource = %state.info, namespace = %ns, error = %message, "the watch failed again; retrying");
    } else {
        error!(resource = %state.info, namespace = %ns, error = %message, "the watch failed; retrying with backoff");
        *last = Some(message);
    }
}
