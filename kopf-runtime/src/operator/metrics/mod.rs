//! `/metrics`: the operator's registry (the user's `prometheus_client` registry, or a new one)
//! with one collector of the operator's own metrics in it, read at scrape time from counters the
//! parts keep anyway: the supervisors' per-handler counters and instance census, the request
//! counter of the client, the watches' health, the records of the objects, the write slots, and
//! the election or shard membership. Nothing is recorded for the metrics alone, except the
//! supervisors' per-handler counters (a few atomic additions per invocation).
//!
//! Labels are the resource kind, the handler id, and a result, reason, step, verb or status
//! code: never an object's name, namespace or UID, so the number of series does not grow with
//! the objects.

mod encode;
mod probe;

use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use tokio::sync::Semaphore;

use super::ha::report::ReplicaReport;
use super::limits::RateLimiter;
pub(crate) use probe::{KindProbe, WatchProbe};

/// The operator's metrics: the registry `/metrics` serves, and the collector in it.
#[derive(Debug, Clone)]
pub(crate) struct OperatorMetrics {
    registry: Arc<Registry>,
    collector: Arc<OperatorCollector>,
}

impl OperatorMetrics {
    /// `registry` (or a new one) with the operator's collector registered in it. The resource
    /// kinds are [attached](Self::attach) once they are launched; until then only the
    /// requests and the replica state are reported.
    pub(crate) fn new(
        registry: Option<Registry>,
        limiter: Option<Arc<RateLimiter>>,
        replicas: Option<Arc<dyn ReplicaReport>>,
    ) -> Self {
        let collector = Arc::new(OperatorCollector {
            limiter,
            replicas,
            attached: OnceLock::new(),
        });
        let mut registry = registry.unwrap_or_default();
        registry.register_collector(Box::new(collector.clone()));
        Self {
            registry: Arc::new(registry),
            collector,
        }
    }

    /// The registry to serve.
    pub(crate) fn registry(&self) -> Arc<Registry> {
        self.registry.clone()
    }

    /// Reports the kinds from now on, the watches that wake their reconcile handlers, and the
    /// write slots (`limit` of them; the first call counts).
    pub(crate) fn attach(
        &self,
        kinds: Vec<KindProbe>,
        watches: Vec<WatchProbe>,
        slots: &Arc<Semaphore>,
        limit: usize,
    ) {
        let writes = WriteSlots {
            slots: slots.clone(),
            limit,
        };
        let attached = Attached {
            kinds,
            watches,
            writes,
        };
        let _first = self.collector.attached.set(attached);
    }
}

/// The writes in flight: the slots and how many there are.
#[derive(Debug)]
struct WriteSlots {
    slots: Arc<Semaphore>,
    limit: usize,
}

impl WriteSlots {
    /// The slots taken now.
    fn in_flight(&self) -> usize {
        self.limit.saturating_sub(self.slots.available_permits())
    }
}

/// What is attached once the kinds run.
#[derive(Debug)]
struct Attached {
    kinds: Vec<KindProbe>,
    /// The children's and related objects' watches.
    watches: Vec<WatchProbe>,
    writes: WriteSlots,
}

/// The collector of the operator's metrics.
#[derive(Debug)]
struct OperatorCollector {
    limiter: Option<Arc<RateLimiter>>,
    /// The coordination's snapshots (`None`: alone).
    replicas: Option<Arc<dyn ReplicaReport>>,
    attached: OnceLock<Attached>,
}

impl Collector for OperatorCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        if let Some(attached) = self.attached.get() {
            let kinds: Vec<_> = attached.kinds.iter().map(encode::KindView::read).collect();
            encode::handlers(&mut encoder, &kinds)?;
            encode::instances(&mut encoder, &kinds)?;
            encode::changes(&mut encoder, &kinds)?;
            encode::kinds(&mut encoder, &kinds)?;
            encode::watches(&mut encoder, &attached.watches)?;
            encode::writes(
                &mut encoder,
                attached.writes.in_flight(),
                attached.writes.limit,
            )?;
        }
        if let Some(limiter) = &self.limiter {
            encode::requests(&mut encoder, limiter)?;
        }
        let Some(replicas) = &self.replicas else {
            return Ok(());
        };
        if let Some(leadership) = replicas.leadership() {
            encode::leadership(&mut encoder, &leadership)?;
        }
        if let Some(membership) = replicas.membership() {
            encode::membership(&mut encoder, &membership)?;
        }
        match replicas.lease() {
            Some(lease) => encode::lease(&mut encoder, &lease),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
