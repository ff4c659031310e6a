//! One object's changes (its diff base, the change in flight, whether its change task runs)
//! and the decisions about them: which change to start, when to stop the task, whether the
//! finalizer is held. Kept as parts (`parts.rs`) of the supervisor and of each object entry;
//! `changes.rs` drives them.

use std::sync::Arc;

use jiff::Timestamp;
use serde_json::Value;

use crate::core::changes::base::DiffBase;
use crate::core::changes::essence::{self, EssenceCfg};
use crate::core::changes::field::Observed;
use crate::core::changes::machine::{ChangeRun, Detected, Inputs, detect};
use crate::core::changes::progress::Progress;
use crate::core::changes::{BuildError, ChangeHandler, ChangeHandlers, ChangeKind, FieldPath};
use crate::core::diff::{ChangeContext, FieldValues};
use crate::core::erased::ErasedHandler;
use crate::core::keys::Keys;
use crate::core::object::ObjectState;
use crate::core::spec::HandlerKind;
use crate::core::stop::StopReason;
use crate::core::supervisor::run::instance::InstanceShared;
use crate::core::supervisor::run::parts::ObjectPart;
use crate::core::supervisor::run::state::ObjectEntry;

/// A kind's change handlers and where their state is stored (one per supervisor).
pub(crate) struct Changes {
    /// The change handlers, in the defined order.
    pub(crate) handlers: ChangeHandlers,
    /// The annotations of the diff base and the progress.
    pub(crate) keys: Keys,
    /// The operator's annotation prefix (its own annotations are not part of the essence).
    own_prefix: String,
}

/// The change kind of a handler kind (`None`: a daemon or a timer).
pub(crate) fn change_kind(kind: HandlerKind) -> Option<ChangeKind> {
    match kind {
        HandlerKind::Create => Some(ChangeKind::Create),
        HandlerKind::Update => Some(ChangeKind::Update),
        HandlerKind::Delete => Some(ChangeKind::Delete),
        HandlerKind::Resume => Some(ChangeKind::Resume),
        HandlerKind::Daemon | HandlerKind::Timer | HandlerKind::Reconcile => None,
    }
}

/// Checks that a kind's change handlers can run together (see [`Changes::build`]).
///
/// # Errors
/// Why they cannot.
pub(crate) fn check(handlers: &[Arc<dyn ErasedHandler>]) -> Result<(), BuildError> {
    Changes::build(handlers, "", "").map(drop)
}

impl Changes {
    /// The change handlers among `handlers` (`None`: there are none), stored under `prefix`
    /// with the operator's storage name taken from its `finalizer` ([`storage_name`]).
    ///
    /// [`storage_name`]: crate::core::keys::storage_name
    ///
    /// # Errors
    /// A handler watches a change handler's result, or a change's progress could not fit.
    pub(crate) fn build(
        handlers: &[Arc<dyn ErasedHandler>],
        prefix: &str,
        finalizer: &str,
    ) -> Result<Option<Self>, BuildError> {
        let list: Vec<ChangeHandler> = handlers
            .iter()
            .enumerate()
            .filter_map(|(index, handler)| {
                let spec = handler.spec();
                let kind = change_kind(spec.kind)?;
                Some(ChangeHandler {
                    index,
                    id: spec.id,
                    kind,
                    location: spec.location,
                    watch: (spec.change.field).map(|f| FieldPath {
                        path: f.path,
                        segments: f.segments,
                    }),
                    optional: kind == ChangeKind::Delete && !spec.finalizer,
                })
            })
            .collect();
        if list.is_empty() {
            return Ok(None);
        }
        Ok(Some(Self {
            handlers: ChangeHandlers::new(list)?,
            keys: Keys::of_operator(prefix, finalizer),
            own_prefix: prefix.to_owned(),
        }))
    }

    fn cfg(&self) -> EssenceCfg<'_> {
        EssenceCfg {
            own_prefix: &self.own_prefix,
            watched: self.handlers.watched(),
        }
    }

    /// The digest of a version's essence (computed outside the supervisor's lock).
    pub(crate) fn digest(&self, body: &Value) -> u64 {
        essence::digest(body, &self.cfg())
    }

    /// A version, with the digest computed for it.
    fn observed<'b>(&self, body: &'b Value, digest: u64) -> Observed<'b> {
        let fields = (self.handlers.watched().iter())
            .map(|field| (field.path, essence::lookup(body, field)))
            .collect();
        Observed { digest, fields }
    }

    /// The change handler `index`, if it is one of `kind`.
    pub(crate) fn of(&self, index: usize, kind: ChangeKind) -> Option<&ChangeHandler> {
        (self.handlers.all().iter()).find(|h| h.index == index && h.kind == kind)
    }
}

/// One object's changes, in its entry (only in supervisors with change handlers).
pub(crate) struct ObjectChanges {
    /// The diff base: as stored on the object when loaded, then as this process wrote it.
    pub(crate) base: Option<DiffBase>,
    /// The base when the change in flight started (the old values of watched fields).
    pub(crate) from: Option<DiffBase>,
    /// The change in flight (a finished delete stays, so that it is not run again).
    pub(crate) run: Option<ChangeRun>,
    /// The change task, while it runs.
    pub(crate) task: Option<Arc<InstanceShared>>,
    /// The handler the task runs or retries, and when its cycle started (for `/metrics`).
    pub(crate) running: Option<(usize, tokio::time::Instant)>,
    /// The digest of the latest version's essence.
    pub(crate) digest: u64,
    /// The stored state is read from the next version looked at: first sight, or the object
    /// may have been served elsewhere meanwhile (pause, scope).
    pub(crate) reload: bool,
    /// Resume handlers are due: the first sight of the object in this process.
    pub(crate) first_sight: bool,
    /// The object as this process last handled it (`Old`, `Diff`).
    pub(crate) old: Option<Arc<ObjectState>>,
}

impl ObjectPart for ObjectChanges {
    fn busy(&self) -> bool {
        self.task.is_some()
    }

    fn running(&self) -> Option<(usize, &InstanceShared, tokio::time::Instant)> {
        let (task, (index, since)) = (self.task.as_deref()?, self.running?);
        Some((index, task, since))
    }
}

impl ObjectChanges {
    /// An object first seen, with the digest of its version.
    pub(crate) fn new(digest: u64) -> Self {
        Self {
            base: None,
            from: None,
            run: None,
            task: None,
            running: None,
            digest,
            reload: true,
            first_sight: true,
            old: None,
        }
    }

    /// Reads the stored diff base and progress from `object` (malformed ones, and those written
    /// for another object, are logged and read as absent). A delete progress on an object that
    /// is not being deleted is ignored: anyone who may patch the object could write one, and
    /// `on_delete` must never run on a live object.
    fn load(&mut self, changes: &Changes, object: &ObjectState, deleting: bool, now: Timestamp) {
        let keys = &changes.keys;
        let reference = object.reference();
        let body = object.body_value();
        let stored_base = stored(&body, keys, |k| &k.base).and_then(|(key, text)| {
            DiffBase::decode_for(text, &reference.uid)
                .inspect_err(|err| {
                    tracing::warn!(object = %reference, annotation = %key,
                        "the stored diff base is ignored, so the object counts as new: {err}");
                })
                .ok()
        });
        // None stored: this process's own write may not have been seen yet.
        self.base = stored_base.or(self.base.take());
        let stored = stored(&body, keys, |k| &k.progress).and_then(|(key, text)| {
            Progress::decode_for(text, &reference.uid)
                .inspect_err(|err| {
                    tracing::warn!(object = %reference, annotation = %key,
                        "the stored progress is ignored, so the change starts anew: {err}");
                })
                .ok()
                .filter(|progress| {
                    let live_delete = progress.cause == ChangeKind::Delete && !deleting;
                    if live_delete {
                        tracing::warn!(object = %reference, annotation = %key,
                            "the stored progress is a deletion, but the object is not being \
                             deleted: ignored (written by hand, or copied from an old version)");
                    }
                    !live_delete
                })
        });
        let resume = |progress: Progress| {
            let finished = progress.is_finished();
            let mut run = ChangeRun::resume(progress, &changes.handlers);
            if finished {
                // Settles it as finished (a delete done before a restart), writing nothing.
                let _settled = run.next(now, &|_| true);
            }
            run
        };
        // What this process knows may be newer than the version looked at (its own writes not
        // seen yet), or older (another replica went on meanwhile): the records are merged, and
        // a record only moves forward.
        self.run = match (self.run.take(), stored) {
            (Some(mut run), Some(stored)) => Some(if run.absorb(&stored) {
                run
            } else {
                resume(stored)
            }),
            (Some(run), None) => {
                let target = run.progress().target.digest;
                let done_elsewhere = self.base.as_ref().is_some_and(|b| b.digest == target);
                (!done_elsewhere).then_some(run)
            }
            (None, stored) => stored.map(resume),
        };
        self.from.clone_from(&self.base);
    }

    /// Decides the object's change now: `true` if a change is in flight for the task to run.
    pub(crate) fn plan(&mut self, changes: &Changes, facts: &Facts<'_>, now: Timestamp) -> bool {
        if self.reload {
            self.load(changes, facts.object, facts.deleting, now);
            self.reload = false;
        }
        if let Some(run) = &self.run {
            if facts.deleting && run.progress().cause != ChangeKind::Delete {
                self.run = None; // superseded by the deletion
            } else if !run.is_finished() {
                return true;
            }
        }
        let body = facts.object.body_value();
        let observed = changes.observed(&body, self.digest);
        let inputs = Inputs {
            handlers: &changes.handlers,
            observed: &observed,
            base: self.base.as_ref(),
            progress: self.run.as_ref().map(ChangeRun::progress),
            deleting: facts.deleting,
            finalizer_on: facts.finalizer_on,
            finalizer_needed: facts.finalizer_needed,
            delete_matches: facts.delete_matches,
            first_sight: self.first_sight,
        };
        let detected = detect(&inputs);
        self.first_sight = false;
        match detected {
            Detected::Nothing => false,
            Detected::Continue(_) => self.run.as_ref().is_some_and(|r| !r.is_finished()),
            Detected::Start(kind) if !facts.worth(kind) => false,
            Detected::Start(kind) => {
                let base = self.base.as_ref();
                let run = ChangeRun::start(kind, &changes.handlers, base, &observed, now);
                self.from.clone_from(&self.base);
                self.run = Some(run);
                true
            }
        }
    }

    /// Why the running change task must stop now (empty: it may go on).
    pub(crate) fn stop_reason(&self, facts: &Facts<'_>, gone: bool, paused: bool) -> StopReason {
        let mut reason = StopReason::empty();
        let superseded = facts.deleting
            && (self.run.as_ref()).is_some_and(|run| run.progress().cause != ChangeKind::Delete);
        if gone || superseded {
            reason |= StopReason::RESOURCE_DELETED;
        }
        if paused {
            reason |= StopReason::OPERATOR_PAUSING;
        }
        reason
    }

    /// Whether the object's changes keep the finalizer on: a required delete handler matches a
    /// live object, or a delete change is due or unfinished.
    pub(crate) fn holds(&self, facts: &Facts<'_>) -> bool {
        let delete_run =
            (self.run.as_ref()).filter(|run| run.progress().cause == ChangeKind::Delete);
        if self.task.is_some() && delete_run.is_some() {
            return true;
        }
        if !facts.deleting {
            return facts.delete_needed;
        }
        facts.finalizer_on
            && match delete_run {
                Some(run) => run.holds_finalizer(),
                None => facts.delete_matches,
            }
    }

    /// What an invocation of handler `index` learns about the change (for the operator whose
    /// annotations are under `own_prefix`).
    pub(crate) fn context(
        &self,
        handler: &dyn ErasedHandler,
        body: &Value,
        cause: ChangeKind,
        own_prefix: &str,
    ) -> Arc<ChangeContext> {
        let field = handler.spec().change.field.map(|field| {
            let path = FieldPath {
                path: field.path,
                segments: field.segments,
            };
            let stored = (self.from.as_ref()).and_then(|base| base.fields.get(field.path));
            FieldValues {
                old: stored.and_then(|s| s.value()).cloned(),
                new: essence::lookup(body, &path).cloned(),
                old_elided: stored.is_some_and(|s| s.value().is_none()),
            }
        });
        let old = (cause == ChangeKind::Update).then(|| self.old.clone());
        Arc::new(ChangeContext::new(old.flatten(), field).owned_by(own_prefix))
    }
}

/// The annotation `key` of `keys` on `object`, or else the one of the earlier versions' keys.
fn stored<'o>(
    body: &'o Value,
    keys: &Keys,
    key: impl Fn(&Keys) -> &String,
) -> Option<(String, &'o str)> {
    let annotation = |name: &str| {
        body.get("metadata")?
            .get("annotations")?
            .get(name)?
            .as_str()
    };
    let current = key(keys);
    if let Some(text) = annotation(current) {
        return Some((current.clone(), text));
    }
    let legacy = key(keys.legacy.as_deref()?);
    annotation(legacy).map(|text| (legacy.clone(), text))
}

/// What `reconcile` knows of an object for its changes.
pub(crate) struct Facts<'a> {
    /// The latest version.
    pub(crate) object: &'a ObjectState,
    /// It is being deleted.
    pub(crate) deleting: bool,
    /// Our finalizer is on it.
    pub(crate) finalizer_on: bool,
    /// A finalizer-holding handler matches it (create waits for the finalizer then).
    pub(crate) finalizer_needed: bool,
    /// A required (not `optional`) delete handler matches the live object.
    pub(crate) delete_needed: bool,
    /// A delete handler matches the deleting version.
    pub(crate) delete_matches: bool,
    /// The kinds of the create, update and resume handlers that match the latest version.
    pub(crate) matching: Vec<ChangeKind>,
}

impl Facts<'_> {
    /// Whether a change of `kind` would run anything, or store anything worth storing: a
    /// handler of its kind matches (a create also stores the base the update handlers need).
    /// A change that would only skip every handler is not started, so objects no handler
    /// matches cost no write.
    fn worth(&self, kind: ChangeKind) -> bool {
        let matches = |k: ChangeKind| self.matching.contains(&k);
        match kind {
            ChangeKind::Create => matches(ChangeKind::Create) || matches(ChangeKind::Update),
            ChangeKind::Update | ChangeKind::Resume => matches(kind),
            ChangeKind::Delete => true,
        }
    }
}

/// The facts of `entry`, whose latest version is `object`.
pub(crate) fn facts<'a>(
    changes: &Changes,
    handlers: &[Arc<dyn ErasedHandler>],
    entry: &ObjectEntry,
    object: &'a ObjectState,
    await_finalizer: bool,
) -> Facts<'a> {
    let deleting = entry.deleting || entry.gone;
    let matched = |index: usize| entry.slots[index].matched;
    let delete = |index: usize| changes.of(index, ChangeKind::Delete);
    let mut delete_needed = false;
    let mut delete_matches = false;
    let mut finalizer_needed = false;
    let mut matching = Vec::new();
    for (index, handler) in handlers.iter().enumerate() {
        if !matched(index) {
            continue;
        }
        if let Some(handler) = delete(index) {
            delete_matches = true;
            delete_needed |= !handler.optional && !deleting;
        }
        let kinds = [ChangeKind::Create, ChangeKind::Update, ChangeKind::Resume];
        matching.extend(
            kinds
                .into_iter()
                .filter(|&k| changes.of(index, k).is_some()),
        );
        finalizer_needed |= handler.spec().finalizer && !deleting;
    }
    Facts {
        object,
        deleting,
        finalizer_on: entry.finalizer_on,
        finalizer_needed: await_finalizer && finalizer_needed,
        delete_needed,
        delete_matches: delete_matches && deleting,
        matching,
    }
}
