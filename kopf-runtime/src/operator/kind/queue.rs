//! One serial job queue per object: the jobs of one object run in order, objects run
//! concurrently (at most [`Queues::SLOTS`] at a time, each on one of as many worker tasks; the
//! others wait in a list, not in a task of their own), and how a new job joins a queue.
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
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
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
    /// How many workers may run ([`Queues::SLOTS`] but in tests).
    slots: usize,
    pending: Mutex<Pending>,
    /// Notified after every job (see [`Queues::progress`]).
    progressed: Notify,
    stop: CancellationToken,
    tasks: TaskTracker,
}

/// The objects with jobs, and the workers running them.
#[derive(Debug, Default)]
struct Pending {
    /// The jobs of every object that has some, queued or running.
    queues: HashMap<Arc<str>, ObjectJobs>,
    /// Objects whose jobs wait for a worker, first come first served.
    waiting: VecDeque<Arc<str>>,
    /// Workers running (at most [`Queues::SLOTS`]).
    workers: usize,
}

impl Queues {
    /// How many objects' jobs run at once; the others wait for a worker. A running job's
    /// future holds its API requests (several KB); a waiting object only its place in a list
    /// (no task of its own), so thousands of objects queued at start-up or in a mass deletion
    /// cost little memory — and nothing after they ran, since the process keeps the peak of its
    /// heap. Writes are limited separately (`max_writes_in_flight`), so this many is never the
    /// bottleneck.
    pub(crate) const SLOTS: usize = 256;

    pub(crate) fn new(resource: ResourceInfo) -> Self {
        Self::with_slots(resource, Self::SLOTS)
    }

    /// Queues whose jobs run on at most `slots` workers.
    pub(super) fn with_slots(resource: ResourceInfo, slots: usize) -> Self {
        Self {
            resource,
            slots,
            pending: Mutex::default(),
            progressed: Notify::new(),
            stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }
    }

    /// Queues `job` for the object `uid` (see the module docs). An object new to the queues
    /// gets a worker if fewer than [`Queues::SLOTS`] run, or else waits for the first one free.
    pub(crate) fn push<R: RunJob>(self: &Arc<Self>, runner: &Arc<R>, uid: Arc<str>, job: Job) {
        let mut guard = lock(&self.pending);
        let pending = &mut *guard;
        match pending.queues.entry(uid) {
            Entry::Occupied(mut e) => e.get_mut().push(job),
            Entry::Vacant(e) => {
                let uid = e.key().clone();
                let mut jobs = ObjectJobs::default();
                jobs.push(job);
                e.insert(jobs);
                if pending.workers < self.slots {
                    pending.workers += 1;
                    drop(guard);
                    let worker = Worker {
                        queues: self.clone(),
                        retired: false,
                    };
                    let runner = runner.clone();
                    self.tasks
                        .spawn(async move { worker.work(runner, uid).await });
                } else {
                    pending.waiting.push_back(uid);
                }
            }
        }
    }

    /// Runs the object's jobs one after another until its queue is empty; `false` if the
    /// queues stopped first.
    async fn run_object<R: RunJob>(&self, runner: &R, uid: &Arc<str>) -> bool {
        loop {
            let job = {
                let mut pending = lock(&self.pending);
                let Some(queue) = pending.queues.get_mut(uid) else {
                    return true;
                };
                let Some(job) = queue.pop() else {
                    pending.queues.remove(uid);
                    return true;
                };
                job
            };
            let span = tracing::debug_span!("object", resource = %self.resource, uid = %uid);
            let run = runner.run(uid, job).instrument(span);
            // Boxed: the worker between two objects stays small.
            let ran = Box::pin(self.stop.run_until_cancelled(run)).await;
            self.progressed.notify_waiters();
            if ran.is_none() {
                lock(&self.pending).queues.remove(uid);
                return false;
            }
        }
    }

    /// How many workers run, and how many objects wait for one.
    #[cfg(test)]
    pub(super) fn workers_and_waiting(&self) -> (usize, usize) {
        let pending = lock(&self.pending);
        (pending.workers, pending.waiting.len())
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

/// One of the (at most [`Queues::SLOTS`]) tasks that run the objects' jobs, counted in
/// [`Pending::workers`] until it retires — under the lock that finds no object waiting, so an
/// object pushed meanwhile gets a new worker — or, if it stops otherwise (the queues stopped, a
/// panic), until dropped.
struct Worker {
    queues: Arc<Queues>,
    retired: bool,
}

impl Worker {
    /// Runs the jobs of `uid`, then of each object waiting, until none waits or the queues stop.
    async fn work<R: RunJob>(mut self, runner: Arc<R>, mut uid: Arc<str>) {
        loop {
            let queues = &self.queues;
            if queues.stop.is_cancelled() || !queues.run_object(&*runner, &uid).await {
                return;
            }
            let mut pending = lock(&queues.pending);
            match pending.waiting.pop_front() {
                Some(next) => uid = next,
                None => {
                    pending.workers -= 1;
                    drop(pending);
                    self.retired = true;
                    return;
                }
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if !self.retired {
            lock(&self.queues.pending).workers -= 1;
        }
    }
}

/// One object's jobs waiting to run: a finalizer sync (one is enough), then its outputs. A
/// sync alone, as every object has at start-up, takes no allocation.
#[derive(Debug, Default)]
pub(crate) struct ObjectJobs {
    sync: bool,
    outputs: VecDeque<Job>,
}

impl ObjectJobs {
    /// Adds `job` (see the module docs).
    pub(crate) fn push(&mut self, job: Job) {
        let Job::Output {
            object,
            handler,
            patch,
            outputs,
        } = job
        else {
            self.sync = true;
            return;
        };
        if let Some(Job::Output {
            handler: last_handler,
            patch: last,
            outputs: last_outputs,
            ..
        }) = self.outputs.back_mut()
            && let Some(composed) = compose(last, &patch)
        {
            *last = composed;
            *last_handler = handler;
            *last_outputs += outputs;
            return;
        }
        self.outputs.push_back(Job::Output {
            object,
            handler,
            patch,
            outputs,
        });
    }

    /// The next job to run: the sync first.
    pub(crate) fn pop(&mut self) -> Option<Job> {
        if std::mem::take(&mut self.sync) {
            return Some(Job::Sync);
        }
        self.outputs.pop_front()
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
        let mut queue = ObjectJobs::default();
        for i in 0..1000 {
            queue.push(output("tick", &json!({ "at": i })));
        }
        queue.push(output("other", &json!("ok")));
        queue.push(Job::Sync);
        queue.push(Job::Sync);
        assert_eq!(queue.pop(), Some(Job::Sync));
        let Some(Job::Output {
            patch,
            outputs,
            handler,
            ..
        }) = queue.pop()
        else {
            unreachable!("the output is queued");
        };
        assert_eq!(outputs, 1001);
        assert_eq!(handler, "other");
        assert_eq!(
            Value::Object(patch),
            json!({"status": {"tick": {"at": 999}, "other": "ok"}})
        );
        assert_eq!(queue.pop(), None, "one sync, one output");
    }

    #[test]
    fn an_output_that_does_not_compose_is_queued_after_the_waiting_one() {
        let mut queue = ObjectJobs::default();
        queue.push(output("t", &json!(3)));
        queue.push(output("t", &json!({"now": "an object"})));
        assert!(queue.pop().is_some() && queue.pop().is_some());
        assert_eq!(queue.pop(), None);
    }
}
