//! The watch that keeps a kind's indexes current: whole objects, each version handed to every
//! index of the kind and then dropped, so that only the indexes' pairs are kept.
//!
//! ```text
//!  Init ─► InitApply… ─► InitDone ──► every index: resync(namespace, listed); first time: listed()
//!  Apply(object) ─────────────────► every index: apply (a body that does not decode: taken out)
//!  Delete(object) ────────────────► every index: remove
//! ```
//!
//! Each stream watches one namespace (or all); a relist replaces exactly its namespace's
//! objects. An index is filled once every stream feeding it has listed once.

use std::sync::Arc;

use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::drive::Events;
use super::progress::Progress;
use crate::core::object::ObjectState;
use crate::handler::ErasedIndex;
use crate::operator::health::KindHealth;

/// What one index watch stream watches, and the indexes it feeds.
#[derive(Clone)]
pub(crate) struct IndexWatch {
    /// The indexed kind.
    pub(crate) resource: ApiResource,
    /// The namespace to watch (`None`: all).
    pub(crate) namespace: Option<String>,
    /// Every index of the kind.
    pub(crate) indexes: Vec<Arc<dyn ErasedIndex>>,
    /// The `timeoutSeconds` of each watch request.
    pub(crate) server_timeout: u32,
}

/// Feeds `watch.indexes` from a watch of their kind until `stop`, reporting to `health` as a
/// kind's watch does.
///
/// # Cancellation safety
/// Meant to run in its own task; cancelling it leaves the indexes as of the last whole event.
pub(crate) async fn watch_indexes(
    client: kube::Client,
    watch: IndexWatch,
    health: &Arc<KindHealth>,
    stop: CancellationToken,
) {
    let what = match &watch.namespace {
        Some(ns) => format!("the indexed {} in {ns}", watch.resource.kind),
        None => format!("the indexed {}", watch.resource.kind),
    };
    let (progress, client) = Progress::start(health, &client);
    let api: Api<DynamicObject> = match &watch.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &watch.resource),
        None => Api::all_with(client, &watch.resource),
    };
    let config = watcher::Config::default().timeout(watch.server_timeout);
    let stream = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    let mut feed = Feed::new(&watch, &what);
    let mut events = Events::new(stream, progress, &what, &stop);
    while let Some(event) = events.next().await {
        feed.event(event);
    }
}

/// One stream's events, applied to its indexes.
struct Feed<'a> {
    watch: &'a IndexWatch,
    what: &'a str,
    /// The objects of the list in progress.
    listing: Vec<Arc<ObjectState>>,
    /// The stream has listed once (the indexes were told).
    listed: bool,
}

impl<'a> Feed<'a> {
    fn new(watch: &'a IndexWatch, what: &'a str) -> Self {
        Self {
            watch,
            what,
            listing: Vec::new(),
            listed: false,
        }
    }

    fn event(&mut self, event: Event<DynamicObject>) {
        match event {
            Event::Init => self.listing.clear(),
            Event::InitApply(object) => self.listing.extend(self.state(&object)),
            Event::InitDone => {
                let listed = std::mem::take(&mut self.listing);
                for index in &self.watch.indexes {
                    for problem in index.resync(self.watch.namespace.as_deref(), &listed) {
                        warn!(watch = %self.what, "{problem}");
                    }
                    if !self.listed {
                        index.listed();
                    }
                }
                self.listed = true;
            }
            Event::Apply(object) => {
                let Some(state) = self.state(&object) else {
                    return;
                };
                for index in &self.watch.indexes {
                    if let Err(problem) = index.apply(&state) {
                        warn!(watch = %self.what, "{problem}");
                    }
                }
            }
            Event::Delete(object) => {
                let Some(state) = self.state(&object) else {
                    return;
                };
                for index in &self.watch.indexes {
                    index.remove(state.reference());
                }
            }
        }
    }

    /// The object as the indexes take it; one without a name or UID is skipped, and said.
    fn state(&self, object: &DynamicObject) -> Option<Arc<ObjectState>> {
        let state = serde_json::to_value(object)
            .map_err(|e| e.to_string())
            .and_then(|body| ObjectState::from_json(body).map_err(|e| e.to_string()));
        match state {
            Ok(state) => Some(Arc::new(state)),
            Err(err) => {
                warn!(watch = %self.what, name = ?object.metadata.name, %err, "cannot index an object");
                None
            }
        }
    }
}
