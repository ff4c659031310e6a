//! The kopf-rs population: N objects given to a [`Supervisor`] with one hand-written timer or
//! daemon handler (what `#[timer]` / `#[daemon]` generate, minus the typed decoding).

use std::sync::Arc;
use std::time::Duration;

use kopf_bench::names::{NAMESPACE, object_index, object_name};
use kopf_runtime::HandlerError;
use kopf_runtime::engine::{
    Call, ErasedHandler, HandlerKind, HandlerSpec, Invocation, MatchError, ObjectState, Output,
    Services, Supervisor, SupervisorConfig,
};

use crate::Population;
use crate::track::Tracker;

static DAEMON: HandlerSpec = HandlerSpec::new("tick", HandlerKind::Daemon);

/// The timer's spec at `interval`, built once at start-up and leaked: [`ErasedHandler::spec`]
/// hands out `&'static` specs.
fn timer_spec(interval: Duration) -> &'static HandlerSpec {
    let mut spec = HandlerSpec::new("tick", HandlerKind::Timer);
    spec.schedule.interval = Some(interval);
    Box::leak(Box::new(spec))
}

/// A timer that records its fire, or a daemon that records a tick each interval until stopped.
/// Unless `enabled`, it matches no object (the objects are then only tracked).
struct Tick {
    daemon: bool,
    /// The timer's spec (its interval), or the daemon's.
    spec: &'static HandlerSpec,
    /// The daemon's sleep between two ticks.
    interval: Duration,
    tracker: Arc<Tracker>,
    enabled: bool,
}

impl ErasedHandler for Tick {
    fn spec(&self) -> &'static HandlerSpec {
        self.spec
    }

    fn matches(&self, _: &ObjectState) -> Result<bool, MatchError> {
        Ok(self.enabled)
    }

    fn invoke(&self, inv: Invocation) -> Result<Call, HandlerError> {
        let index = object_index(&inv.object.reference().name).unwrap_or(usize::MAX);
        let (tracker, interval) = (Arc::clone(&self.tracker), self.interval);
        if !self.daemon {
            tracker.fire(index);
            return Ok(Call::Async(Box::pin(async { Ok(Output::default()) })));
        }
        Ok(Call::Async(Box::pin(async move {
            loop {
                tracker.fire(index);
                if inv.stopper.sleep(interval).await {
                    break;
                }
            }
            Ok(Output::default())
        })))
    }
}

/// The objects (prepared before the baseline) and the supervisor that runs them.
pub(crate) struct Supervised {
    objects: Vec<ObjectState>,
    supervisor: Supervisor,
    drain: tokio::task::JoinHandle<u64>,
}

impl Supervised {
    /// Builds the `n` objects and a supervisor with one timer or daemon (`daemon`) at
    /// `interval`, matching every object if `enabled`, none otherwise.
    pub(crate) fn prepare(
        n: usize,
        daemon: bool,
        enabled: bool,
        interval: Duration,
        tracker: Arc<Tracker>,
    ) -> anyhow::Result<Self> {
        let objects = (0..n)
            .map(|i| {
                ObjectState::from_json(serde_json::json!({
                    "apiVersion": "kopf.dev/v1",
                    "kind": "KopfExample",
                    "metadata": {
                        "name": object_name(i),
                        "namespace": NAMESPACE,
                        "uid": format!("00000000-0000-0000-0000-{i:012}"),
                    },
                    "spec": {"field": "value"},
                }))
                // As the supervisor keeps a matched object: the body as text. Compacted here,
                // before the baseline, so that the bytes per instance do not count trees freed
                // when the supervisor compacts what it is given.
                .map(|object| object.compacted())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let handler: Arc<dyn ErasedHandler> = Arc::new(Tick {
            daemon,
            spec: if daemon {
                &DAEMON
            } else {
                timer_spec(interval)
            },
            interval,
            tracker,
            enabled,
        });
        let (supervisor, mut effects) = Supervisor::new(
            vec![handler],
            Services::default(),
            SupervisorConfig::default(),
        );
        // The effects (one finalizer request per object) are drained and counted, as the
        // operator's Kubernetes adapter would consume them.
        let drain = tokio::spawn(async move {
            let mut count = 0;
            while effects.recv().await.is_some() {
                count += 1;
            }
            count
        });
        Ok(Self {
            objects,
            supervisor,
            drain,
        })
    }
}

impl Population for Supervised {
    async fn spawn_all(&mut self) -> anyhow::Result<()> {
        for object in self.objects.drain(..) {
            self.supervisor.observe(object);
        }
        self.objects.shrink_to_fit();
        Ok(())
    }

    async fn stop_all(self) -> anyhow::Result<()> {
        let report = self.supervisor.shutdown().await;
        anyhow::ensure!(
            report.abandoned.is_empty(),
            "{} instances were abandoned at shutdown",
            report.abandoned.len()
        );
        let stats = self.supervisor.stats();
        eprintln!("supervisor stats at exit: {stats:?}");
        drop(self.supervisor);
        self.drain.abort();
        Ok(())
    }
}
