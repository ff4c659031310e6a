//! Where the operator's finalizer is added and removed: [`Finalizers`] makes each object's
//! finalizer match what its supervisor needs (held while a daemon or timer may run, released
//! when none does), with guarded JSON patches that never touch another controller's entries
//! ([`finalizer_patch`]), retried by the write loop, and tried again later (`resync`) when
//! they give up.
//!
//! ```text
//!  Sync job ──▶ step: records + supervisor.holds_finalizer ──▶ nothing to do ──▶ settled
//!                  ▲                 │ a patch
//!                  │                 ▼
//!                  ├── Progress ◀── 200: record the response's view
//!                  ├── Stale ◀───── 409/422: re-read the object (once at once, then backoff)
//!                  └── Later ◀───── 429/5xx/transport: backoff (Retry-After honoured)
//!          404, or the object went with its last finalizer ──▶ forgotten (supervisor told)
//!          403/other, or attempts out ──▶ deferred: `resync` tries it again in 5 s … 60 s
//! ```

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tracing::{debug, error, info};

use super::records::{FinalizerView, Records};
use super::resync::Resync;
use super::{Failure, GaveUp, Next, Retrying, Writer, classify, describe};
use crate::core::object::ObjectRef;
use crate::core::supervisor::Supervisor;
use crate::core::sync::lock;
use crate::operator::scope::Scope;

/// The finalizer of one resource kind's objects.
#[derive(Debug)]
pub(crate) struct Finalizers {
    /// The finalizer's name (`kopf.dev/<operator name>` by default).
    name: Arc<str>,
    writer: Writer,
    records: Arc<Records>,
    supervisor: Supervisor,
    /// Objects whose sync gave up, to be tried again.
    resync: Resync,
    /// Set at shutdown: finalizers are left as they are (daemons resume after a restart).
    frozen: AtomicBool,
    /// The objects this replica serves (all, without leader election or sharding): it adds
    /// and removes no other object's finalizer.
    scope: Mutex<Scope>,
}

impl Finalizers {
    pub(crate) fn new(
        name: Arc<str>,
        writer: Writer,
        records: Arc<Records>,
        supervisor: Supervisor,
    ) -> Self {
        Self {
            name,
            writer,
            records,
            supervisor,
            resync: Resync::default(),
            frozen: AtomicBool::new(false),
            scope: Mutex::new(Scope::All),
        }
    }

    /// Which objects' finalizers are written (the leader's: all; a shard member's: its share).
    pub(crate) fn set_scope(&self, scope: Scope) {
        *lock(&self.scope) = scope;
    }

    /// Whether this replica serves the object (always, without leader election or sharding).
    pub(crate) fn covers(&self, uid: &str) -> bool {
        lock(&self.scope).covers(uid)
    }

    fn writes(&self, uid: &str) -> bool {
        self.covers(uid) && !self.frozen.load(Ordering::SeqCst)
    }

    /// The finalizer's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// From now on, finalizers are neither added nor removed.
    pub(crate) fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Whether every object's finalizer is as the supervisor needs it, or its update gave up
    /// (and is tried again later).
    pub(crate) fn settled(&self) -> bool {
        // Objects out of scope are another replica's job.
        self.records.uids().iter().all(|uid| {
            !self.covers(uid)
                || self.resync.contains(uid)
                || self.step(uid).is_none_or(|(_, patch)| patch.is_none())
        })
    }

    /// Waits until some deferred sync is due, then returns the objects due now.
    ///
    /// # Cancellation safety
    /// Cancel-safe: nothing is taken before the wait ends.
    pub(crate) async fn due(&self) -> Vec<Arc<str>> {
        self.resync.next_due().await;
        self.resync.take_due(tokio::time::Instant::now())
    }

    /// What the finalizer of `uid` should be changed by, if anything.
    fn step(&self, uid: &Arc<str>) -> Option<(ObjectRef, Option<Value>)> {
        let r = self.records.get(uid)?;
        if r.vanished {
            // Nothing to write to an object that is gone; the watch's report drops the record.
            return Some((r.object.clone(), None));
        }
        let hold = self.supervisor.holds_finalizer(uid);
        let patch = if r.gone {
            // Still held while instances that held it are exiting: their exit sends another Sync.
            if hold {
                return None;
            }
            finalizer_patch(&r.object.uid, &r.view, &self.name, false)
        } else {
            finalizer_patch(&r.object.uid, &r.view, &self.name, hold)
        };
        Some((r.object.clone(), patch))
    }

    /// Makes the object's finalizer match the supervisor's need; when it gives up, the sync is
    /// deferred (see [`Finalizers::due`]).
    ///
    /// # Cancellation safety
    /// Dropping the future may leave a patch applied whose response was not recorded; the
    /// next sync reads the object and recomputes.
    pub(crate) async fn sync(&self, uid: &Arc<str>) {
        match self.try_sync(uid).await {
            Ok(()) => self.resync.settled(uid),
            Err(GaveUp {
                error: (object, err),
                ..
            }) => {
                error!(object = %object, uid = %object.uid, error = %describe(&err),
                    "cannot update the finalizer; trying again later");
                let delay = self.resync.defer(uid, tokio::time::Instant::now());
                debug!(resource = %self.writer.info, uid = %uid, ?delay, "the finalizer update is tried again later");
            }
        }
    }

    /// One sync through the write loop: each attempt computes the next patch from the last
    /// seen state, so a guard that failed is recomputed from the object as re-read.
    async fn try_sync(&self, uid: &Arc<str>) -> Result<(), GaveUp<(ObjectRef, kube::Error)>> {
        let mut retrying = Retrying::new(&self.writer.retry, 1);
        loop {
            let next = self.attempt(uid).await;
            if let ControlFlow::Break(result) = retrying.after(next).await {
                return result;
            }
        }
    }

    async fn attempt(&self, uid: &Arc<str>) -> Next<(), (ObjectRef, kube::Error)> {
        if !self.writes(uid) {
            // A standby writes nothing, but forgets what is gone.
            self.records.remove_if_gone(uid);
            return Next::Done(());
        }
        let Some((object, patch)) = self.step(uid) else {
            return Next::Done(());
        };
        let Some(patch) = patch else {
            self.records.remove_if_gone(uid);
            return Next::Done(());
        };
        match self.writer.json_patch(&object, patch).await {
            Ok(updated) => self.patched(uid, &object, FinalizerView::from_object(&updated)),
            Err(err) => self.failed(uid, object, err).await,
        }
    }

    fn patched(
        &self,
        uid: &Arc<str>,
        object: &ObjectRef,
        view: FinalizerView,
    ) -> Next<(), (ObjectRef, kube::Error)> {
        info!(object = %object, uid = %object.uid, finalizer = %self.name,
            present = view.has(&self.name), "finalizer updated");
        if view.deleting && view.finalizers.as_ref().is_none_or(Vec::is_empty) {
            // The last finalizer of a deleted object: the API server removed it.
            self.vanished(uid);
            return Next::Done(());
        }
        self.records.update(uid, view);
        Next::Progress
    }

    async fn failed(
        &self,
        uid: &Arc<str>,
        object: ObjectRef,
        err: kube::Error,
    ) -> Next<(), (ObjectRef, kube::Error)> {
        debug!(object = %object, error = %describe(&err), "a finalizer patch failed");
        match classify(&err) {
            Failure::NotFound => {
                self.vanished(uid);
                Next::Done(())
            }
            Failure::Conflict | Failure::Invalid => match self.writer.read(&object).await {
                Ok(Some(fresh)) => {
                    self.records.update(uid, FinalizerView::from_object(&fresh));
                    Next::Stale((object, err))
                }
                Ok(None) => {
                    self.vanished(uid);
                    Next::Done(())
                }
                Err(_) => Next::Later {
                    min: None,
                    error: (object, err),
                },
            },
            Failure::Transient(min) => Next::Later {
                min,
                error: (object, err),
            },
            Failure::Forbidden | Failure::Fatal => Next::Fail((object, err)),
        }
    }

    /// The object no longer exists (404 or another UID under its name). Its record stays
    /// until the watch reports the deletion (or a relist misses the object): the watch still
    /// needs its name then (the kind's indexes take it out by name), and that report's sync
    /// drops the record.
    fn vanished(&self, uid: &Arc<str>) {
        self.records.vanished(uid);
        self.supervisor.gone(uid);
    }
}

/// The JSON patch that makes the finalizer `name` present (`hold`) or absent, guarded by the
/// object's UID and by a `test` of exactly what it changes, so that concurrent changes by other
/// controllers make it fail (422) instead of being overwritten. `None`: nothing to change (or
/// adding is not allowed because the object is being deleted).
pub(crate) fn finalizer_patch(
    uid: &str,
    view: &FinalizerView,
    name: &str,
    hold: bool,
) -> Option<Value> {
    let uid_test = json!({"op": "test", "path": "/metadata/uid", "value": uid});
    match (hold, view.has(name)) {
        (true, false) if !view.deleting => Some(match &view.finalizers {
            None => json!([
                uid_test,
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [name]},
            ]),
            Some(list) => json!([
                uid_test,
                {"op": "test", "path": "/metadata/finalizers", "value": list},
                {"op": "add", "path": "/metadata/finalizers/-", "value": name},
            ]),
        }),
        (false, true) => {
            let list = view.finalizers.as_deref().unwrap_or_default();
            let index = list.iter().position(|f| f == name)?;
            let path = format!("/metadata/finalizers/{index}");
            Some(json!([
                uid_test,
                {"op": "test", "path": path, "value": name},
                {"op": "remove", "path": path},
            ]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(finalizers: Option<&[&str]>, deleting: bool) -> FinalizerView {
        FinalizerView {
            finalizers: finalizers.map(|f| f.iter().map(|s| (*s).to_owned()).collect()),
            deleting,
            resource_version: None,
        }
    }

    #[test]
    fn adds_to_an_absent_list_with_a_null_test() {
        let p = finalizer_patch("u", &view(None, false), "kopf.dev/finalizer", true).unwrap();
        assert_eq!(
            p[1],
            json!({"op": "test", "path": "/metadata/finalizers", "value": null})
        );
        assert_eq!(p[2]["value"], json!(["kopf.dev/finalizer"]));
    }

    #[test]
    fn appends_to_an_existing_list_after_testing_it() {
        let p = finalizer_patch("u", &view(Some(&["other"]), false), "mine", true).unwrap();
        assert_eq!(
            p[0],
            json!({"op": "test", "path": "/metadata/uid", "value": "u"})
        );
        assert_eq!(p[1]["value"], json!(["other"]));
        assert_eq!(
            p[2],
            json!({"op": "add", "path": "/metadata/finalizers/-", "value": "mine"})
        );
    }

    #[test]
    fn removes_only_its_own_entry() {
        let p =
            finalizer_patch("u", &view(Some(&["a", "mine", "b"]), true), "mine", false).unwrap();
        assert_eq!(
            p[1],
            json!({"op": "test", "path": "/metadata/finalizers/1", "value": "mine"})
        );
        assert_eq!(
            p[2],
            json!({"op": "remove", "path": "/metadata/finalizers/1"})
        );
    }

    #[test]
    fn never_adds_while_deleting_and_skips_no_ops() {
        assert_eq!(finalizer_patch("u", &view(None, true), "mine", true), None);
        assert_eq!(
            finalizer_patch("u", &view(Some(&["mine"]), false), "mine", true),
            None
        );
        assert_eq!(
            finalizer_patch("u", &view(Some(&["a"]), false), "mine", false),
            None
        );
    }

    #[test]
    fn every_finalizer_patch_tests_the_uid_first() {
        // A patch aimed at an object deleted and recreated under the same name (a late one, say,
        // from a deposed leader) fails its first operation: the new object has another UID.
        let views = [
            (view(None, false), true),
            (view(Some(&["other"]), false), true),
            (view(Some(&["mine"]), false), false),
            (view(Some(&["a", "mine"]), true), false),
        ];
        for (view, hold) in views {
            let patch = finalizer_patch("the-uid", &view, "mine", hold).expect("a change");
            assert_eq!(
                patch[0],
                json!({"op": "test", "path": "/metadata/uid", "value": "the-uid"}),
                "{view:?} hold={hold}"
            );
        }
    }
}
