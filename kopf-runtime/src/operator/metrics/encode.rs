//! Encoding the operator's metrics: one function per group of metric families, each family
//! with all its samples together, as OpenMetrics requires.

use std::fmt::Result;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::probe::{KindProbe, WatchProbe};
use crate::core::spec::{HandlerKind, HandlerSpec};
use crate::core::supervisor::census::Census;
use crate::core::supervisor::meter::{
    HandlerMeter, HistogramSnapshot, InvocationResult, StopCause,
};
use crate::core::supervisor::rules::ladder::StopStep;
use crate::operator::ha::alarm::LeaseReport;
use crate::operator::ha::ranges::SHARD_RANGES;
use crate::operator::ha::report::Membership;
use crate::operator::ha::report::{Leadership, Role};
use crate::operator::limits::RateLimiter;

/// One kind as read at the start of a scrape.
pub(super) struct KindView<'a> {
    resource: &'a str,
    /// Every handler's spec and counters (none if the supervisor does not count).
    handlers: Vec<(&'static HandlerSpec, &'a HandlerMeter)>,
    /// Per handler, its instances now.
    census: Vec<Census>,
    objects: usize,
    finalizers: usize,
    restarts: u64,
    relists: u64,
}

impl<'a> KindView<'a> {
    pub(super) fn read(probe: &'a KindProbe) -> Self {
        let (handlers, census) = match &probe.meters {
            Some(meters) => (meters.handlers().collect(), meters.census()),
            None => (Vec::new(), Vec::new()),
        };
        let (objects, finalizers) = probe.records.census(&probe.finalizer);
        let (restarts, relists) = probe.health.watch_counts();
        Self {
            resource: &probe.resource,
            handlers,
            census,
            objects,
            finalizers,
            restarts,
            relists,
        }
    }
}

/// Starts a metric family.
fn family<'e>(
    encoder: &'e mut DescriptorEncoder<'_>,
    name: &'e str,
    help: &str,
    unit: Option<&'e Unit>,
    kind: MetricType,
) -> std::result::Result<MetricEncoder<'e>, std::fmt::Error> {
    encoder.encode_descriptor(name, help, unit, kind)
}

fn counter(metric: &mut MetricEncoder<'_>, labels: &impl EncodeLabelSet, value: u64) -> Result {
    metric
        .encode_family(labels)?
        .encode_counter::<NoLabelSet, _, u64>(&value, None)
}

fn gauge<V: prometheus_client::encoding::EncodeGaugeValue>(
    metric: &mut MetricEncoder<'_>,
    labels: &impl EncodeLabelSet,
    value: &V,
) -> Result {
    metric.encode_family(labels)?.encode_gauge(value)
}

fn histogram(
    metric: &mut MetricEncoder<'_>,
    labels: &impl EncodeLabelSet,
    snap: &HistogramSnapshot,
) -> Result {
    let mut family = metric.encode_family(labels)?;
    family.encode_histogram::<NoLabelSet>(snap.sum, snap.count, &snap.buckets, None)
}

/// One handler of one kind, as the families iterate them.
struct Handler<'a> {
    resource: &'a str,
    spec: &'static HandlerSpec,
    meter: &'a HandlerMeter,
    census: Census,
}

impl Handler<'_> {
    fn labels(&self) -> [(&'static str, &str); 2] {
        [("resource", self.resource), ("handler", self.spec.id)]
    }

    fn is(&self, kind: HandlerKind) -> bool {
        self.spec.kind == kind
    }
}

fn each<'a>(kinds: &'a [KindView<'a>]) -> impl Iterator<Item = Handler<'a>> + 'a {
    kinds.iter().flat_map(|kind| {
        let census = kind
            .census
            .iter()
            .copied()
            .chain(std::iter::repeat(Census::default()));
        kind.handlers
            .iter()
            .zip(census)
            .map(|((spec, meter), census)| Handler {
                resource: kind.resource,
                spec,
                meter,
                census,
            })
    })
}

/// The per-handler families of invocations: results, durations, retries, stops.
pub(super) fn handlers(encoder: &mut DescriptorEncoder<'_>, kinds: &[KindView<'_>]) -> Result {
    let (seconds, counter_t) = (Unit::Seconds, MetricType::Counter);
    let mut m = family(
        encoder,
        "kopf_handler_invocations",
        "Handler invocations that ended, by result: success, error (arbitrary), temporary, permanent, panic, timeout, stopped (by the stop ladder)",
        None,
        counter_t,
    )?;
    for h in each(kinds) {
        for result in InvocationResult::ALL {
            let [resource, handler] = h.labels();
            let labels = [resource, handler, ("result", result.as_str())];
            counter(&mut m, &labels, h.meter.outcomes(result))?;
        }
    }
    let mut m = family(
        encoder,
        "kopf_handler_invocation_duration",
        "How long handler invocations ran",
        Some(&seconds),
        MetricType::Histogram,
    )?;
    for h in each(kinds) {
        histogram(&mut m, &h.labels(), &h.meter.duration.snapshot())?;
    }
    let mut m = family(
        encoder,
        "kopf_handler_retries",
        "Failed invocations that are retried after a delay",
        None,
        counter_t,
    )?;
    for h in each(kinds) {
        counter(&mut m, &h.labels(), h.meter.retries())?;
    }
    let mut m = family(
        encoder,
        "kopf_handler_stops",
        "Instances stopped, by reason (deleted, mismatch, pausing, exiting) and the last step of the stop ladder they needed (exited, signalled, cancelled, abandoned)",
        None,
        counter_t,
    )?;
    for h in each(kinds) {
        for cause in StopCause::ALL {
            for step in StopStep::ALL {
                let [resource, handler] = h.labels();
                let labels = [
                    resource,
                    handler,
                    ("reason", cause.as_str()),
                    ("step", step.as_str()),
                ];
                counter(&mut m, &labels, h.meter.stops(cause, step))?;
            }
        }
    }
    Ok(())
}

/// The per-handler families of instances: lateness, running, scheduled, stopping, queued.
pub(super) fn instances(encoder: &mut DescriptorEncoder<'_>, kinds: &[KindView<'_>]) -> Result {
    let (seconds, gauge_t) = (Unit::Seconds, MetricType::Gauge);
    let mut m = family(
        encoder,
        "kopf_timer_lateness",
        "How late timer runs started after their schedule (interval, sharp tick, idle, cron occurrence; jitter included in the schedule)",
        Some(&seconds),
        MetricType::Histogram,
    )?;
    for h in each(kinds).filter(|h| h.is(HandlerKind::Timer)) {
        histogram(&mut m, &h.labels(), &h.meter.lateness.snapshot())?;
    }
    let mut m = family(
        encoder,
        "kopf_daemons_running",
        "Daemon instances running (not asked to stop, not queued)",
        None,
        gauge_t,
    )?;
    for h in each(kinds).filter(|h| h.is(HandlerKind::Daemon)) {
        gauge(&mut m, &h.labels(), &h.census.running)?;
    }
    let mut m = family(
        encoder,
        "kopf_timers_scheduled",
        "Timer instances scheduled (between runs or in one; not asked to stop, not queued)",
        None,
        gauge_t,
    )?;
    for h in each(kinds).filter(|h| h.is(HandlerKind::Timer)) {
        gauge(&mut m, &h.labels(), &h.census.running)?;
    }
    let mut m = family(
        encoder,
        "kopf_handlers_stopping",
        "Instances asked to stop that have not exited yet (daemons, timers, change and reconcile tasks)",
        None,
        gauge_t,
    )?;
    for h in each(kinds) {
        gauge(&mut m, &h.labels(), &h.census.stopping)?;
    }
    let mut m = family(
        encoder,
        "kopf_handlers_stopping_longest",
        "How long the instance stopping for the longest time has been stopping (0: none)",
        Some(&seconds),
        gauge_t,
    )?;
    for h in each(kinds) {
        gauge(&mut m, &h.labels(), &h.census.oldest_stop.as_secs_f64())?;
    }
    let mut m = family(
        encoder,
        "kopf_handlers_queued",
        "Blocking instances waiting for a dedicated thread",
        None,
        gauge_t,
    )?;
    for h in each(kinds) {
        gauge(&mut m, &h.labels(), &h.census.queued)?;
    }
    Ok(())
}

/// The per-handler families of changes in flight: how many objects, and the longest cycle.
pub(super) fn changes(encoder: &mut DescriptorEncoder<'_>, kinds: &[KindView<'_>]) -> Result {
    let (seconds, gauge_t) = (Unit::Seconds, MetricType::Gauge);
    let changes = || each(kinds).filter(|h| h.spec.kind.is_change());
    let mut m = family(
        encoder,
        "kopf_change_handlers_running",
        "Objects whose change runs this change handler now (its retries' waits included)",
        None,
        gauge_t,
    )?;
    for h in changes() {
        gauge(&mut m, &h.labels(), &h.census.changing)?;
    }
    let mut m = family(
        encoder,
        "kopf_change_handler_running_longest",
        "How long the longest of those has been in the handler's current cycle (0: none)",
        Some(&seconds),
        gauge_t,
    )?;
    for h in changes() {
        gauge(&mut m, &h.labels(), &h.census.oldest_change.as_secs_f64())?;
    }
    Ok(())
}

/// The per-kind families: objects, finalizers, watch restarts and relists.
pub(super) fn kinds(encoder: &mut DescriptorEncoder<'_>, kinds: &[KindView<'_>]) -> Result {
    type Read = fn(&KindView<'_>) -> u64;
    let families: [(&str, &str, MetricType, Read); 4] = [
        (
            "kopf_objects",
            "Objects of the kind the operator knows (watched, not gone)",
            MetricType::Gauge,
            |k| k.objects as u64,
        ),
        (
            "kopf_finalizers_held",
            "Objects of the kind carrying the operator's finalizer, as last seen",
            MetricType::Gauge,
            |k| k.finalizers as u64,
        ),
        (
            "kopf_watch_restarts",
            "Watch failures of the kind (each restarts the watch after a backoff)",
            MetricType::Counter,
            |k| k.restarts,
        ),
        (
            "kopf_watch_relists",
            "Lists of the kind after a watch stream's first one (expired or failed watches)",
            MetricType::Counter,
            |k| k.relists,
        ),
    ];
    for (name, help, kind, read) in families {
        let mut m = family(encoder, name, help, None, kind)?;
        for k in kinds {
            let labels = [("resource", k.resource)];
            match kind {
                MetricType::Counter => counter(&mut m, &labels, read(k))?,
                _ => gauge(&mut m, &labels, &read(k))?,
            }
        }
    }
    Ok(())
}

/// The families of the watches that wake reconcile handlers: their failures and relists, by
/// watched kind and role (`children` or `related`), as `kinds` counts a kind's own watch.
pub(super) fn watches(encoder: &mut DescriptorEncoder<'_>, watches: &[WatchProbe]) -> Result {
    type Read = fn((u64, u64)) -> u64;
    let families: [(&str, &str, Read); 2] = [
        (
            "kopf_relation_watch_restarts",
            "Failures of a children's or related objects' watch (each restarts it after a backoff)",
            |(restarts, _)| restarts,
        ),
        (
            "kopf_relation_watch_relists",
            "Lists of a children's or related objects' watch after a stream's first one",
            |(_, relists)| relists,
        ),
    ];
    for (name, help, read) in families {
        let mut m = family(encoder, name, help, None, MetricType::Counter)?;
        for w in watches {
            let labels = [("resource", w.resource.as_str()), ("watch", w.role)];
            counter(&mut m, &labels, read(w.health.watch_counts()))?;
        }
    }
    Ok(())
}

/// The write slots.
pub(super) fn writes(
    encoder: &mut DescriptorEncoder<'_>,
    in_flight: usize,
    limit: usize,
) -> Result {
    let gauge_t = MetricType::Gauge;
    let mut m = family(
        encoder,
        "kopf_api_writes_in_flight",
        "Writes (patches, finalizer changes, Events) sent and not answered yet",
        None,
        gauge_t,
    )?;
    m.encode_gauge(&in_flight)?;
    let mut m = family(
        encoder,
        "kopf_api_writes_in_flight_limit",
        "The limit on writes in flight (max_writes_in_flight); further writes wait",
        None,
        gauge_t,
    )?;
    m.encode_gauge(&limit)
}

/// The requests of the operator's client, by verb and status code, and the throttled ones.
pub(super) fn requests(encoder: &mut DescriptorEncoder<'_>, limiter: &RateLimiter) -> Result {
    let mut m = family(
        encoder,
        "kopf_api_requests",
        "Requests of the operator's client (handlers' requests through the injected client and Lease requests included) by verb and status code (<error>: no answer)",
        None,
        MetricType::Counter,
    )?;
    for (verb, status, count) in limiter.answers() {
        let code = if status == 0 {
            "<error>".to_owned()
        } else {
            status.to_string()
        };
        counter(
            &mut m,
            &[("verb", verb.as_str()), ("code", code.as_str())],
            count,
        )?;
    }
    let (client, server) = limiter.throttled();
    let mut m = family(
        encoder,
        "kopf_api_throttled",
        "Requests throttled: held back by the client-side limit (by=client), or answered 429 by the API server (by=server)",
        None,
        MetricType::Counter,
    )?;
    counter(&mut m, &[("by", "client")], client)?;
    counter(&mut m, &[("by", "server")], server)
}

/// Leader election: whether this replica leads.
pub(super) fn leadership(encoder: &mut DescriptorEncoder<'_>, leadership: &Leadership) -> Result {
    let mut m = family(
        encoder,
        "kopf_leader_election_leading",
        "1 while this replica leads (runs the handlers), 0 while it stands by",
        None,
        MetricType::Gauge,
    )?;
    m.encode_gauge(&u32::from(leadership.role == Role::Leader))
}

/// Sharding: this member's ranges, the live members, and the objects it serves.
pub(super) fn membership(encoder: &mut DescriptorEncoder<'_>, membership: &Membership) -> Result {
    let ranges = format!("Shard ranges this member serves (of {SHARD_RANGES})");
    let families = [
        ("kopf_shard_ranges_held", ranges.as_str(), membership.held),
        (
            "kopf_shard_members",
            "Live members of the sharded group, as this member sees them",
            membership.members.len(),
        ),
        (
            "kopf_shard_objects",
            "Objects this member serves (of every kind)",
            membership.objects,
        ),
    ];
    for (name, help, value) in families {
        family(encoder, name, help, None, MetricType::Gauge)?.encode_gauge(&value)?;
    }
    Ok(())
}

/// Leader election and sharding: the problems of this replica's Lease.
pub(super) fn lease(encoder: &mut DescriptorEncoder<'_>, report: &LeaseReport) -> Result {
    let mut m = family(
        encoder,
        "kopf_lease_errors",
        "Reads and writes of this replica's Lease that failed (RBAC, a missing namespace, the API \
         server away); while they fail, the replica cannot lead or serve",
        None,
        MetricType::Counter,
    )?;
    m.encode_counter::<NoLabelSet, _, u64>(&report.errors, None)?;
    let gauges = [
        (
            "kopf_lease_failing",
            "1 while the attempts to read or write this replica's Lease fail",
            report.failing.is_some(),
        ),
        (
            "kopf_lease_identity_conflict",
            "1 while another process with this replica's identity holds its Lease (this one \
             refuses to lead or serve)",
            report.twin,
        ),
    ];
    for (name, help, value) in gauges {
        family(encoder, name, help, None, MetricType::Gauge)?.encode_gauge(&u32::from(value))?;
    }
    Ok(())
}
