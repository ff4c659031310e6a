//! Handler outputs (results, patches, a cron run's record) on their way to the API server, and
//! what a shard member does with those of the ranges it hands over.
//!
//! An output is written while this replica serves its object. A shard member that stops
//! serving a range still holds it until it releases it in the group's claims, and it releases
//! it only once the range is quiet: no instance running or stopping, and no output sent and
//! not yet written or given up (the supervisor counts outputs from the moment they are sent,
//! see `core::supervisor::outputs`; each job settles its count when it ends). So the outputs of
//! objects it stopped serving are still written, and the next member reads them (a cron run's
//! record included: it does not run that occurrence again). Its writes stay fenced by its
//! validity: after a lapse (its scope goes to nothing, its fence closes) such outputs are given
//! up, as with leader election, where the whole scope goes at once with the fence.
//!
//! ```text
//!  scope narrows ──▶ retained: the objects of the old scope that left it
//!  output job ──▶ served? ──yes──▶ write
//!                    └─no──▶ retained (sharding, still valid)? ──yes──▶ write
//!                                                 └─no──▶ given up (logged)
//!  job ends ──▶ settled: the object stops counting as busy ──▶ its range may be released
//! ```

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tracing::{debug, error, warn};

use super::common::KindCommon;
use crate::core::clearance::Clearance;
use crate::core::object::ObjectRef;
use crate::core::sync::lock;
use crate::operator::scope::Scope;
use crate::operator::write::patch::KubePatchSink;

/// Where one kind's handler outputs go: the sink that writes them, and the objects out of
/// scope whose outputs are still written.
#[derive(Debug)]
pub(crate) struct Outputs {
    pub(crate) sink: KubePatchSink,
    pub(crate) retained: Retained,
}

/// The objects a shard member stopped serving but whose outputs it still writes.
#[derive(Debug)]
pub(crate) struct Retained {
    /// Only a shard member keeps any (leader election hands everything over at once).
    sharded: bool,
    /// The member's validity: nothing is retained once it lapsed.
    clearance: Option<Clearance>,
    held: Mutex<Held>,
}

/// What [`Retained`] holds.
#[derive(Debug, Default)]
struct Held {
    /// The scope before the latest change: every object it covers (a range left then is
    /// released only once its objects are quiet, and nothing starts out of scope, so no output
    /// of its objects comes after that).
    left: Option<Scope>,
    /// The objects left in earlier changes that were still busy at the latest one.
    uids: HashSet<Arc<str>>,
}

impl Retained {
    /// For a shard member (`sharded`) or not, valid while `clearance` is clear.
    pub(crate) fn new(sharded: bool, clearance: Option<Clearance>) -> Self {
        Self {
            sharded,
            clearance,
            held: Mutex::default(),
        }
    }

    /// The scope goes from `old` to `new` (called before anything follows `new`, so that an
    /// output never finds its object neither served nor retained). `busy`: the objects with an
    /// instance or an output under way now. Retained from now on: whatever `old` covers, and
    /// the objects retained before that are still busy (an object that is not busy has no
    /// output to come). Nothing when the scope goes to nothing or the member's validity
    /// lapsed.
    pub(crate) fn follow(&self, old: &Scope, new: &Scope, busy: &[Arc<str>]) {
        let mut held = lock(&self.held);
        let valid = self.clearance.as_ref().is_some_and(Clearance::is_clear);
        if !self.sharded || matches!(new, Scope::Nothing) || !valid {
            *held = Held::default();
            return;
        }
        let busy: HashSet<&Arc<str>> = busy.iter().collect();
        let previous = held.left.replace(old.clone());
        held.uids
            .retain(|uid| !new.covers(uid) && busy.contains(uid));
        if let Some(previous) = previous {
            let left = busy.into_iter().filter(|uid| previous.covers(uid));
            held.uids
                .extend(left.filter(|uid| !new.covers(uid)).cloned());
        }
    }

    /// Whether the outputs of `uid` are written though it is out of scope.
    pub(crate) fn holds(&self, uid: &str) -> bool {
        let held = lock(&self.held);
        held.uids.contains(uid) || held.left.as_ref().is_some_and(|left| left.covers(uid))
    }
}

impl Outputs {
    /// Stores handlers' outputs (results and patches) merged into one merge patch, then
    /// settles them (the object no longer counts as busy for them).
    pub(super) async fn output(
        &self,
        common: &KindCommon,
        object: &ObjectRef,
        handler: &'static str,
        patch: Map<String, Value>,
        outputs: u32,
    ) {
        self.write_output(common, object, handler, patch, outputs)
            .await;
        common.supervisor.outputs_settled(&object.uid, outputs);
    }

    async fn write_output(
        &self,
        common: &KindCommon,
        object: &ObjectRef,
        handler: &'static str,
        patch: Map<String, Value>,
        outputs: u32,
    ) {
        // Read once: the scope may narrow meanwhile (retained before it narrows).
        let covered = common.finalizers.covers(&object.uid);
        let retained = !covered && self.retained.holds(&object.uid);
        // A retained object's record may be gone with its range (server-side sharding): the
        // write finds out whether the object itself is.
        if !retained && common.records.get(&object.uid).is_none_or(|r| r.gone) {
            debug!(object = %object, handler, "the object is gone; output dropped");
            return;
        }
        if !covered && !retained {
            if self.retained.sharded {
                warn!(object = %object, uid = %object.uid, handler, outputs,
                    "sharding: this member no longer holds the object's range (its Lease lapsed); \
                     the handlers' output is given up");
            } else {
                debug!(object = %object, handler, "this replica no longer serves the object; output dropped");
            }
            return;
        }
        match self.sink.apply_now(object, Value::Object(patch)).await {
            Ok(()) => {
                debug!(object = %object, handler, outputs, retained, "stored the handlers' output")
            }
            Err(err) if err.gone => {
                debug!(object = %object, handler, "the object is gone; output dropped")
            }
            Err(err) => {
                error!(object = %object, uid = %object.uid, handler, outputs, error = %err.message,
                "cannot store the handlers' output")
            }
        }
    }
}
