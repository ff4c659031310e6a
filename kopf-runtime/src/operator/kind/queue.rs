//! One serial job queue per object: the jobs of one object run in order, objects run
//! concurrently (at most [`Queues::SLOTS`] at a time), and how a new job joins a queue.
//!
//! A finalizer sync goes first (one is enough: it reads the latest state when it runs). Handler
//! outputs (results and patches) are JSON merge patches; a new one is merged into the output
//! still waiting at the tail of the queue when the two compose exactly, so an object whose
//! timers produce results faster than the API server takes writes keeps one pending write with
//! the latest values, not a backlog that grows without bound.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tokio::sync::futures::Notified;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::core::object::ObjectRef;
use crate::core::resource::ResourceInfo;
use crate::core::sync::lock;

/// One unit of work for an object.
#[derive(Debug, PartialEq)]
pub(crate) enum Job {
    /// Make the finalizer match what the supervisor needs.
    Sync,
    /// Apply handler outputs: `status.<handler>` results and handlers' own patches, as one
    /// merge patch.
    Output {
        object: ObjectRef,
        /// The handler of the latest output merged in (for messages).
        handler: &'static str,
        patch: Map<String, Value>,
        /// How many outputs this job carries.
        outputs: u32,
    },
}

/// What runs the jobs of the queues.
pub(crate) trait RunJob: Send + Sync + 'static {
    /// Runs one job of the object `uid`.
    fn run(&self, uid: &Arc<str>, job: Job) -> impl Future<Output = ()> + Send;
}

/// The job queues of one resource kind's objects, and the kind's background tasks.
#[derive(Debug)]
pub(crate) struct Queues {
    resource: ResourceInfo,
    queues: Mutex<HashMap<Arc<str>, VecDeque<Job>>>,
    /// Objects whose jobs may run at once (see [`Queues::SLOTS`]).
    slots: Arc<Semaphore>,
    /// Notified after every job (see [`Queues::progress`]).
    progressed: Notify,
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Queues {
    /// How many objects' jobs run at once; the others wait for a slot. A running job's future
    /// holds its API requests (several KB); a waiting one almost nothing, so thousands of
    /// objects queued at start-up or in a mass deletion cost little memory. Writes are limited
    /// separately (`max_writes_in_flight`), so this many is never the bottleneck.
    pub(crate) const SLOTS: usize = 256;

    pub(crate) fn new(resource: ResourceInfo) -> Self {
        Self {
            resource,
            queues: Mutex::default(),
            slots: Arc::new(Semaphore::new(Self::SLOTS)),
            progressed: Notify::new(),
            stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }
    }

    /// Queues `job` for the object `uid` (see the module docs), and starts the object's worker
    /// if it has none.
    pub(crate) fn push<R: RunJob>(self: &Arc<Self>, runner: &Arc<R>, uid: Arc<str>, job: Job) {
        let mut queues = lock(&self.queues);
        match queues.entry(uid) {
            Entry::Occupied(mut e) => push(e.get_mut(), job),
            Entry::Vacant(e) => {
                let uid = e.key().clone();
                e.insert(VecDeque::from([job]));
                let (this, runner) = (self.clone(), runner.clone());
                self.tasks
                    .spawn(async move { this.work(runner, uid).await });
            }
        }
    }

    /// Runs the object's jobs one after another until its queue is empty.
    async fn work<R: RunJob>(self: Arc<Self>, runner: Arc<R>, uid: Arc<str>) {
        let slots = Arc::clone(&self.slots);
        let Some(Ok(_slot)) = self.stop.run_until_cancelled(slots.acquire()).await else {
            lock(&self.queues).remove(&uid);
            return;
        };
        loop {
            let job = {
                let mut queues = lock(&self.queues);
                let Some(queue) = queues.get_mut(&uid) else {
                    return;
                };
                let Some(job) = queue.pop_front() else {
                    queues.remove(&uid);
                    return;
                };
                job
            };
            let span = tracing::debug_span!("object", resource = %self.resource, uid = %uid);
            let run = runner.run(&uid, job).instrument(span);
            // Boxed: the task waiting for its slot stays small.
            let ran = Box::pin(self.stop.run_until_cancelled(run)).await;
            self.progressed.notify_waiters();
            if ran.is_none() {
                lock(&self.queues).remove(&uid);
                return;
            }
        }
    }

    /// Runs `task` beside the jobs (e.g. posting an Event) until the queues stop.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let stop = self.stop.clone();
        self.tasks.spawn(async move {
            stop.run_until_cancelled(task).await;
        });
    }

    /// Resolves after the next job of any object has run.
    pub(crate) fn progress(&self) -> Pin<Box<Notified<'_>>> {
        Box::pin(self.progressed.notified())
    }

    /// Lets the jobs and tasks under way finish until `deadline`, then stops them (new ones are
    /// still accepted until then). `false` if some did not finish in time.
    ///
    /// # Cancellation safety
    /// Dropping the future leaves the queues running.
    pub(crate) async fn drain(&self, deadline: tokio::time::Instant) -> bool {
        self.tasks.close();
        let finished = tokio::time::timeout_at(deadline, self.tasks.wait())
            .await
            .is_ok();
        self.stop.cancel();
        finished
    }

    /// A token cancelled when the queues stop.
    pub(crate) fn stopped(&self) -> CancellationToken {
        self.stop.clone()
    }
}

/// Adds `job` to an object's queue (see the module docs).
pub(crate) fn push(queue: &mut VecDeque<Job>, job: Job) {
    match job {
        Job::Sync if matches!(queue.front(), Some(Job::Sync)) => {}
        Job::Sync => queue.push_front(job),
        Job::Output {
            object,
            handler,
            patch,
            outputs,
        } => {
            if let Some(Job::Output {
                handler: last_handler,
                patch: last,
                outputs: last_outputs,
                ..
            }) = queue.back_mut()
                && let Some(composed) = compose(last, &patch)
            {
                *last = composed;
                *last_handler = handler;
                *last_outputs += outputs;
                return;
            }
            queue.push_back(Job::Output {
                object,
                handler,
                patch,
                outputs,
            });
        }
    }
}

/// One merge patch with the effect of applying `first`, then `second` — `None` when no single
/// merge patch has it (where `second` sets an object on a field that `first` deleted or set to
/// a non-object: the object would be merged into the target's old value instead of replacing
/// it).
pub(crate) fn compose(
    first: &Map<String, Value>,
    second: &Map<String, Value>,
) -> Option<Map<String, Value>> {
    let mut out = first.clone();
    for (key, value) in second {
        let merged = match (out.get(key), value) {
            (Some(Value::Object(a)), Value::Object(b)) => Value::Object(compose(a, b)?),
            (Some(_), Value::Object(_)) => return None,
            _ => value.clone(),
        };
        out.insert(key.clone(), merged);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("a test patch is an object"),
        }
    }

    /// RFC 7386 applied to a target, to check composition against sequential application.
    fn apply(target: &Value, patch: &Value) -> Value {
        let Value::Object(patch) = patch else {
            return patch.clone();
        };
        let mut out = match target {
            Value::Object(t) => t.clone(),
            _ => Map::new(),
        };
        for (k, v) in patch {
            if v.is_null() {
                out.remove(k);
            } else {
                let next = apply(out.get(k).unwrap_or(&Value::Null), v);
                out.insert(k.clone(), next);
            }
        }
        Value::Object(out)
    }

    fn output(handler: &'static str, result: &Value) -> Job {
        Job::Output {
            object: ObjectRef {
                uid: Arc::from("u1"),
                namespace: Some(Arc::from("ns")),
                name: Arc::from("a"),
            },
            handler,
            patch: map(serde_json::json!({ "status": { handler: result.clone() } })),
            outputs: 1,
        }
    }

    #[test]
    fn composing_equals_applying_in_turn_where_it_is_exact() {
        let target = json!({"spec": {"a": 1, "b": {"c": 2, "d": 3}}, "status": {"x": "old"}});
        let cases = [
            (json!({"status": {"x": 1}}), json!({"status": {"x": 2}})),
            (json!({"spec": {"a": null}}), json!({"spec": {"a": 5}})),
            (
                json!({"spec": {"b": {"c": 9}}}),
                json!({"spec": {"b": {"d": null}}}),
            ),
            (
                json!({"spec": {"a": 7}}),
                json!({"metadata": {"labels": {"k": "v"}}}),
            ),
            (
                json!({"spec": {"b": {"c": null}}}),
                json!({"spec": {"b": {"c": 4}}}),
            ),
        ];
        for (a, b) in cases {
            let composed = compose(&map(a.clone()), &map(b.clone())).expect("exact");
            assert_eq!(
                apply(&target, &Value::Object(composed)),
                apply(&apply(&target, &a), &b),
                "{a} then {b}"
            );
        }
    }

    #[test]
    fn an_object_over_a_deleted_or_scalar_field_does_not_compose() {
        let set_obj = map(json!({"spec": {"b": {"c": 1}}}));
        assert!(compose(&map(json!({"spec": {"b": null}})), &set_obj).is_none());
        assert!(compose(&map(json!({"spec": {"b": 3}})), &set_obj).is_none());
        assert!(compose(&map(json!({"spec": {}})), &set_obj).is_some());
    }

    #[test]
    fn outputs_merge_into_the_waiting_one_and_a_sync_goes_first_once() {
        let mut queue = VecDeque::new();
        for i in 0..1000 {
            push(&mut queue, output("tick", &json!({ "at": i })));
        }
        push(&mut queue, output("other", &json!("ok")));
        push(&mut queue, Job::Sync);
        push(&mut queue, Job::Sync);
        assert_eq!(queue.len(), 2, "{queue:?}");
        assert!(matches!(queue.front(), Some(Job::Sync)));
        let Some(Job::Output {
            patch,
            outputs,
            handler,
            ..
        }) = queue.back()
        else {
            unreachable!("the output is queued");
        };
        assert_eq!(*outputs, 1001);
        assert_eq!(*handler, "other");
        assert_eq!(
            Value::Object(patch.clone()),
            json!({"status": {"tick": {"at": 999}, "other": "ok"}})
        );
    }

    #[test]
    fn an_output_that_does_not_compose_is_queued_after_the_waiting_one() {
        let mut queue = VecDeque::new();
        push(&mut queue, output("t", &json!(3)));
        push(&mut queue, output("t", &json!({"now": "an object"})));
        assert_eq!(queue.len(), 2);
    }
}
