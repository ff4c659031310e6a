//! Objects, and a supervisor with its log and timestamped effects.

use super::*;

/// An object builder: `Obj::new("u1").label("run", "yes").spec(json!({..})).build()`.
#[derive(Clone)]
pub struct Obj {
    body: Value,
}

impl Obj {
    pub fn new(uid: &str) -> Self {
        Self::named(uid, &format!("obj-{uid}"))
    }

    pub fn named(uid: &str, name: &str) -> Self {
        Self {
            body: json!({
                "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
                "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1"},
                "spec": {},
            }),
        }
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.body["metadata"]["labels"][key] = json!(value);
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.body["metadata"]["annotations"][key] = json!(value);
        self
    }

    pub fn spec(mut self, spec: Value) -> Self {
        self.body["spec"] = spec;
        self
    }

    pub fn status(mut self, status: Value) -> Self {
        self.body["status"] = status;
        self
    }

    pub fn version(mut self, rv: u64) -> Self {
        self.body["metadata"]["resourceVersion"] = json!(rv.to_string());
        self
    }

    pub fn finalizer(mut self, name: &str) -> Self {
        self.body["metadata"]["finalizers"] = json!([name]);
        self
    }

    pub fn created(mut self, at: &str) -> Self {
        self.body["metadata"]["creationTimestamp"] = json!(at);
        self
    }

    pub fn deleting(mut self) -> Self {
        self.body["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        self
    }

    pub fn build(&self) -> ObjectState {
        ObjectState::from_json(self.body.clone()).unwrap()
    }
}

/// A supervisor with its log, and every effect timestamped as it arrives.
pub struct Harness {
    pub sup: Supervisor,
    pub log: Log,
    fx: Arc<Mutex<Vec<(u64, Effect)>>>,
}

pub fn config() -> SupervisorConfig {
    SupervisorConfig {
        seed: Some(1),
        ..SupervisorConfig::default()
    }
}

impl Harness {
    pub fn new(handlers: Vec<H>) -> Self {
        Self::with_config(handlers, config())
    }

    pub fn with_config(handlers: Vec<H>, config: SupervisorConfig) -> Self {
        Self::with_services(handlers, config, Services::default(), Log::new())
    }

    /// A harness whose supervisor gets `services` (e.g. a patch sink), logging into `log`.
    pub fn with_services(
        handlers: Vec<H>,
        config: SupervisorConfig,
        services: Services,
        log: Log,
    ) -> Self {
        let handlers = handlers.into_iter().map(|h| h.build(&log)).collect();
        let (sup, mut rx) = Supervisor::new(handlers, services, config);
        let fx: Arc<Mutex<Vec<(u64, Effect)>>> = Arc::default();
        let (sink, clock) = (Arc::clone(&fx), log.clone());
        tokio::spawn(async move {
            while let Some(effect) = rx.recv().await {
                sink.lock().unwrap().push((clock.now(), effect));
            }
        });
        Self { sup, log, fx }
    }

    pub fn observe(&self, obj: &Obj) {
        self.sup.observe(obj.build());
    }

    pub fn gone(&self, uid: &str) {
        self.sup.gone(uid);
    }

    /// Sleeps until `ms` after the start of the test.
    pub async fn at(&self, ms: u64) {
        tokio::time::sleep_until(self.log.t0 + Duration::from_millis(ms)).await;
    }

    pub fn now(&self) -> u64 {
        self.log.now()
    }

    pub fn stats(&self) -> Stats {
        self.sup.stats()
    }

    /// Lets ready tasks run without letting paused time pass, until `cond` holds (a real-time
    /// bound of 10 s turns a hang into a failure).
    pub async fn settle(&self, cond: impl Fn(&Self) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !cond(self) {
            assert!(
                std::time::Instant::now() < deadline,
                "settle: condition never held"
            );
            tokio::task::yield_now().await;
        }
    }

    /// Lets ready tasks run (a few rounds) without letting paused time pass.
    pub async fn spin(&self) {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    pub fn effects(&self) -> Vec<(u64, Effect)> {
        self.fx.lock().unwrap().clone()
    }

    /// `(ms, hold)` of the finalizer effects of one object.
    pub fn finalizer(&self, uid: &str) -> Vec<(u64, bool)> {
        self.effects()
            .into_iter()
            .filter_map(|(at, e)| match e {
                Effect::Finalizer { object, hold } if &*object.uid == uid => Some((at, hold)),
                _ => None,
            })
            .collect()
    }

    /// `(ms, result)` of one handler's outputs.
    pub fn results(&self, handler: &str) -> Vec<(u64, Option<Value>)> {
        self.effects()
            .into_iter()
            .filter_map(|(at, e)| match e {
                Effect::Output {
                    handler: h, result, ..
                } if h == handler => Some((at, result)),
                _ => None,
            })
            .collect()
    }

    /// `(ms, fatal)` of one handler's failures.
    pub fn failures(&self, handler: &str) -> Vec<(u64, bool)> {
        self.effects()
            .into_iter()
            .filter_map(|(at, e)| match e {
                Effect::Failure {
                    handler: h, fatal, ..
                } if h == handler => Some((at, fatal)),
                _ => None,
            })
            .collect()
    }

    /// Failure messages of one handler.
    pub fn failure_messages(&self, handler: &str) -> Vec<String> {
        self.effects()
            .into_iter()
            .filter_map(|(_, e)| match e {
                Effect::Failure {
                    handler: h,
                    message,
                    ..
                } if h == handler => Some(message),
                _ => None,
            })
            .collect()
    }
}
