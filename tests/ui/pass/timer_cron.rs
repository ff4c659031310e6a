//! Cron timers: the expression, time zone and missed-occurrence policy reach the spec as written.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::engine::{CronSchedule, Missed};
use kopf_runtime::{HandlerError, Registry, timer};

#[timer(
    cron = "0 3 * * MON-FRI",
    tz = "Europe/Berlin",
    missed = "run_once",
    jitter = "10m"
)]
async fn nightly(pod: Arc<Pod>) -> Result<String, HandlerError> {
    Ok(pod.metadata.name.clone().unwrap_or_default())
}

#[timer(cron = "30 */15 * * * *", missed = "skip")]
fn quarterly(_pod: Arc<Pod>) {}

#[timer(cron = "@daily")]
async fn daily(_pod: Arc<Pod>) {}

#[timer(interval = "1m")]
async fn plain(_pod: Arc<Pod>) {}

fn main() {
    let registry = Registry::from_inventory().unwrap();
    let nightly = registry.get("nightly").unwrap().spec();
    assert_eq!(
        nightly.schedule.cron,
        Some(CronSchedule {
            expr: "0 3 * * MON-FRI",
            tz: "Europe/Berlin",
            missed: Missed::RunOnce,
        })
    );
    assert_eq!(nightly.schedule.jitter, Some(Duration::from_secs(600)));
    assert_eq!(nightly.schedule.interval, None);
    let quarterly = registry.get("quarterly").unwrap().spec();
    assert!(quarterly.blocking);
    assert_eq!(
        quarterly.schedule.cron.map(|c| (c.expr, c.tz, c.missed)),
        Some(("30 */15 * * * *", "UTC", Missed::Skip))
    );
    let daily = registry.get("daily").unwrap().spec();
    assert_eq!(daily.schedule.cron.map(|c| c.missed), Some(Missed::Skip));
    assert_eq!(registry.get("plain").unwrap().spec().schedule.cron, None);
}
