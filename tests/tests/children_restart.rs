//! The child watch across an outage, through the fault proxy: its connections cut and every new
//! watch refused (503) for a while, then the resumed watch told its resourceVersion expired
//! (410), so it relists. What happened meanwhile reaches the owners: a child edited while the
//! watch was down triggers its owner, a child deleted meanwhile (vanished at the relist) its
//! owner, and an unchanged child no one (checked after the positive controls). And a watch of a
//! kind the API server does not serve logs an error naming the kind, once, and keeps retrying.

mod children_common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{TestNamespace, test_config};
use kube::api::DeleteParams;

use children_common::{Triggers, child_watch, config_map, edit, reference_to};

/// How long the recovery may take: the watch's backoff (kube's default, up to 30 s between
/// attempts) grows while every attempt is refused.
const RECOVERED: Duration = Duration::from_secs(45);

#[tokio::test]
async fn changes_made_while_the_watch_was_down_reach_the_owners() -> anyhow::Result<()> {
    let ns = TestNamespace::create().await?;
    let proxy = FaultProxy::start(&test_config().await?).await?;
    let client = kube::Client::try_from(proxy.config())?;
    let triggers = Triggers::default();
    let (stop, _canary) = child_watch(client, &ns, Default::default(), &triggers).await?;
    let uid = |cm: &ConfigMap| cm.metadata.uid.clone().unwrap_or_default();
    let (edited, deleted, quiet) = (
        config_map(&ns, "edited", None).await?,
        config_map(&ns, "deleted", None).await?,
        config_map(&ns, "quiet", None).await?,
    );
    for owner in [&edited, &deleted, &quiet] {
        let name = format!(
            "{}-child",
            owner.metadata.name.as_deref().unwrap_or_default()
        );
        config_map(&ns, &name, Some(reference_to(owner))).await?;
        triggers.wait(&uid(owner), 1).await;
    }

    // The outage: every watch refused, the open ones cut.
    let refused = proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::unavailable()));
    proxy.handle().drop_connections();
    edit::<ConfigMap>(&ns, "edited-child", "while-down").await?;
    ns.api::<ConfigMap>()
        .delete("deleted-child", &DeleteParams::default())
        .await?;
    // The watch is refused at least once before it is let through (no event can pass).
    let refusals = || {
        let log = proxy.handle().log();
        log.iter()
            .filter(|r| r.fault.as_ref().and_then(Fault::status_code) == Some(503))
            .count()
    };
    kopf_tests::wait_until("a refused watch", RECOVERED, || async { refusals() > 0 }).await;
    assert_eq!(
        triggers.of(&uid(&edited)).len(),
        1,
        "an event passed the outage"
    );

    // Back, but the resourceVersion has expired: the watch relists.
    proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::WatchGone).times(1));
    let back = Instant::now();
    assert!(proxy.handle().remove(refused));
    triggers.wait_for(&uid(&edited), 2, RECOVERED).await;
    triggers.wait_for(&uid(&deleted), 2, RECOVERED).await;
    println!(
        "the owners heard of the outage's changes {:?} after it ended",
        back.elapsed()
    );
    // The positive controls came through the same relist: the unchanged child triggered no one.
    assert_eq!(triggers.of(&uid(&quiet)), ["quiet-child"]);
    assert_eq!(triggers.of(&uid(&edited)), ["edited-child", "edited-child"]);
    let relisted = proxy
        .handle()
        .log()
        .iter()
        .any(|r| r.fault == Some(Fault::WatchGone));
    assert!(
        relisted,
        "the watch was not told its resourceVersion expired"
    );
    stop.cancel();
    ns.cleanup().await
}

/// A writer of log lines into a shared buffer.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut bytes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_kind_that_is_not_served_is_logged_by_name_and_retried() -> anyhow::Result<()> {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    // A current-thread runtime: the watch's task logs through this thread's subscriber.
    let _logging = tracing::subscriber::set_default(subscriber);
    let ns = TestNamespace::create().await?;
    let proxy = FaultProxy::start(&test_config().await?).await?;
    let client = kube::Client::try_from(proxy.config())?;
    let absent = kube::core::ApiResource {
        group: "absent.kopf.dev".into(),
        version: "v1".into(),
        api_version: "absent.kopf.dev/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let watch = kopf_runtime::__private::children::ChildWatch {
        resource: absent,
        namespace: Some(ns.name().to_owned()),
        owners: Vec::new(),
        server_timeout: 60,
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let triggers = Triggers::default();
    tokio::spawn(kopf_runtime::__private::children::watch_children(
        client.clone(),
        watch,
        Default::default(),
        triggers.by_uid(),
        stop.clone(),
    ));
    let lists = || {
        let log = proxy.handle().log();
        log.iter().filter(|r| r.path.contains("/widgets")).count()
    };
    kopf_tests::wait_until("the list retried", RECOVERED, || async { lists() >= 2 }).await;
    let text = logs.text();
    assert!(
        text.contains("the children Widget in")
            && text.contains("the kind is not served (is its CRD applied?)"),
        "{text}"
    );
    // Logged once as an error, the retries at debug level (not shown by default here either).
    assert_eq!(text.matches("the kind is not served").count(), 1, "{text}");
    // The positive control of the log capture and of the operator serving on: another watch
    // through the same client delivers.
    let (other, _canary) = child_watch(client, &ns, Default::default(), &triggers).await?;
    stop.cancel();
    other.cancel();
    ns.cleanup().await
}
