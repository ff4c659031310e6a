//! The simulated cluster: objects in memory, changed the way the API server changes them (every
//! change a new `resourceVersion`, a deletion waiting for the finalizers), and shown to the
//! supervisor of their kind after every change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::core::clock::WallClock;
use crate::core::effects::Effect;
use crate::core::object::{ObjectRef, ObjectState};
use crate::core::resource::ResourceInfo;
use crate::core::result_patch::output_patch;
use crate::core::sink::{PatchError, PatchSink};
use crate::core::supervisor::Supervisor;
use crate::core::sync::lock;

/// One object and its kind.
struct Stored {
    info: ResourceInfo,
    body: Value,
}

/// Every simulated object, and what the handlers did.
pub(super) struct World {
    finalizer: String,
    clock: WallClock,
    objects: HashMap<String, Stored>,
    supervisors: HashMap<ResourceInfo, Supervisor>,
    results: Vec<(String, Value)>,
    failures: Vec<(String, String)>,
    uids: u64,
    version: u64,
}

impl World {
    pub(super) fn new(finalizer: String, clock: WallClock) -> Self {
        Self {
            finalizer,
            clock,
            objects: HashMap::new(),
            supervisors: HashMap::new(),
            results: Vec::new(),
            failures: Vec::new(),
            uids: 0,
            version: 0,
        }
    }

    pub(super) fn attach(&mut self, info: ResourceInfo, supervisor: Supervisor) {
        self.supervisors.insert(info, supervisor);
    }

    fn find(&self, info: &ResourceInfo, namespace: Option<&str>, name: &str) -> Option<String> {
        let namespace = namespace.filter(|_| info.namespaced);
        self.objects.iter().find_map(|(uid, stored)| {
            let meta = &stored.body["metadata"];
            (stored.info == *info
                && meta["name"].as_str() == Some(name)
                && meta["namespace"].as_str() == namespace)
                .then(|| uid.clone())
        })
    }

    pub(super) fn create(&mut self, info: ResourceInfo, mut body: Value) -> ObjectRef {
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_else(|| panic!("an object to create needs metadata.name"))
            .to_owned();
        if info.namespaced && body["metadata"]["namespace"].is_null() {
            body["metadata"]["namespace"] = json!("default");
        }
        let namespace = body["metadata"]["namespace"].as_str().map(str::to_owned);
        assert!(
            self.find(&info, namespace.as_deref(), &name).is_none(),
            "{name} exists already"
        );
        self.uids += 1;
        let uid = format!("simulated-{}", self.uids);
        body["metadata"]["uid"] = json!(uid);
        body["metadata"]["creationTimestamp"] = json!(self.now());
        self.objects.insert(uid.clone(), Stored { info, body });
        self.changed(&uid);
        ObjectRef {
            uid: uid.into(),
            namespace: namespace.map(Into::into),
            name: name.into(),
        }
    }

    pub(super) fn update(&mut self, info: &ResourceInfo, mut body: Value) {
        let name = body["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = body["metadata"]["namespace"].as_str().or(Some("default"));
        let uid = self
            .find(info, namespace, name)
            .unwrap_or_else(|| panic!("no {} {name} to update", info.kind));
        let Some(stored) = self.objects.get_mut(&uid) else {
            return;
        };
        let old = &stored.body;
        for key in ["uid", "namespace", "creationTimestamp", "finalizers"] {
            body["metadata"][key] = old["metadata"][key].clone();
        }
        body["metadata"]["deletionTimestamp"] = old["metadata"]["deletionTimestamp"].clone();
        body["status"] = old["status"].clone();
        stored.body = body;
        self.changed(&uid);
    }

    pub(super) fn delete(&mut self, info: &ResourceInfo, namespace: Option<&str>, name: &str) {
        let namespace = namespace.or(Some("default"));
        let uid = self
            .find(info, namespace, name)
            .unwrap_or_else(|| panic!("no {} {name} to delete", info.kind));
        let now = self.now();
        if let Some(stored) = self.objects.get_mut(&uid) {
            stored.body["metadata"]["deletionTimestamp"] = json!(now);
        }
        self.changed(&uid);
    }

    pub(super) fn get(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let uid = self.find(info, namespace.or(Some("default")), name)?;
        self.objects.get(&uid).map(|stored| stored.body.clone())
    }

    pub(super) fn results(&self, handler: &str) -> Vec<Value> {
        of(&self.results, handler)
    }

    pub(super) fn failures(&self, handler: &str) -> Vec<String> {
        of(&self.failures, handler)
    }

    /// Applies a merge patch, as a new version; `false` if the object is gone.
    fn patch(&mut self, uid: &str, patch: &Value) -> bool {
        let Some(stored) = self.objects.get_mut(uid) else {
            return false;
        };
        json_patch::merge(&mut stored.body, patch);
        self.changed(uid);
        true
    }

    /// Adds or removes the framework's finalizer.
    fn finalizer(&mut self, uid: &str, hold: bool) {
        let name = self.finalizer.clone();
        let Some(stored) = self.objects.get_mut(uid) else {
            return;
        };
        let meta = &mut stored.body["metadata"];
        let mut finalizers: Vec<Value> = meta["finalizers"].as_array().cloned().unwrap_or_default();
        let present = finalizers.iter().any(|f| f.as_str() == Some(name.as_str()));
        match (hold, present) {
            (true, false) if meta["deletionTimestamp"].is_null() => finalizers.push(json!(name)),
            (false, true) => finalizers.retain(|f| f.as_str() != Some(name.as_str())),
            _ => return,
        }
        meta["finalizers"] = json!(finalizers);
        self.changed(uid);
    }

    /// A new version of `uid`: shown to its supervisor, or — deleted with no finalizer left —
    /// gone.
    fn changed(&mut self, uid: &str) {
        self.version += 1;
        let version = self.version.to_string();
        let Some(stored) = self.objects.get_mut(uid) else {
            return;
        };
        stored.body["metadata"]["resourceVersion"] = json!(version);
        let meta = &stored.body["metadata"];
        let finalized = meta["finalizers"].as_array().is_none_or(Vec::is_empty);
        let supervisor = self.supervisors.get(&stored.info).cloned();
        if !meta["deletionTimestamp"].is_null() && finalized {
            self.objects.remove(uid);
            if let Some(supervisor) = supervisor {
                supervisor.gone(uid);
            }
            return;
        }
        let state = ObjectState::from_json(stored.body.clone());
        if let (Some(supervisor), Ok(state)) = (supervisor, state) {
            supervisor.observe(state);
        }
    }

    fn now(&self) -> String {
        // Kubernetes keeps creation and deletion times in whole seconds.
        let now = self.clock.now();
        jiff::Timestamp::from_second(now.as_second())
            .unwrap_or(now)
            .to_string()
    }
}

fn of<T: Clone>(records: &[(String, T)], handler: &str) -> Vec<T> {
    records
        .iter()
        .filter(|(h, _)| h == handler)
        .map(|(_, value)| value.clone())
        .collect()
}

/// The [`PatchSink`] and the effects loop of one kind: what the operator's Kubernetes side does,
/// done to the simulated objects.
#[derive(Clone)]
pub(super) struct Sink {
    world: Arc<Mutex<World>>,
}

impl Sink {
    pub(super) fn new(world: &Arc<Mutex<World>>) -> Self {
        Self {
            world: Arc::clone(world),
        }
    }

    /// Carries out the supervisor's effects until it is dropped.
    ///
    /// # Cancellation safety
    /// Cancel-safe: each effect is carried out at once.
    pub(super) async fn serve(self, mut effects: mpsc::UnboundedReceiver<Effect>) {
        while let Some(effect) = effects.recv().await {
            let mut world = lock(&self.world);
            match effect {
                Effect::Finalizer { object, hold } => world.finalizer(&object.uid, hold),
                Effect::Output {
                    object,
                    handler,
                    result,
                    patch,
                } => {
                    if let Some(result) = &result {
                        world.results.push((handler.to_owned(), result.clone()));
                    }
                    // The patch the operator would write (a patch that is not a JSON object is
                    // ignored there too).
                    let (merged, _rejected) = output_patch(handler, result, patch);
                    if !merged.is_empty() {
                        world.patch(&object.uid, &Value::Object(merged));
                    }
                }
                Effect::Failure {
                    handler, message, ..
                }
                | Effect::Skipped {
                    handler, message, ..
                } => world.failures.push((handler.to_owned(), message)),
            }
        }
    }
}

impl PatchSink for Sink {
    fn apply(
        &self,
        object: &ObjectRef,
        patch: Value,
    ) -> BoxFuture<'static, Result<(), PatchError>> {
        let applied = lock(&self.world).patch(&object.uid, &patch);
        let result = if applied {
            Ok(())
        } else {
            Err(PatchError {
                object: object.to_string(),
                message: "the object is gone".to_owned(),
                gone: true,
            })
        };
        Box::pin(std::future::ready(result))
    }
}
