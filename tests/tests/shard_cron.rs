//! Cron timers across a sharding handover, against the real API server, with two members in
//! one process: a `missed = "run_once"` cron timer records every occurrence it runs, with the
//! member that ran it. The first member's writes of the cron record are slowed down at its
//! fault proxy, and a second member joins right after an occurrence ran: the first member
//! hands the second one's share over while the records of that occurrence are still on their
//! way. It must not release those ranges before the records are written, or the second member
//! (which reads the record when its timer starts) runs that occurrence again as a missed one.
//! Then the first member exits gracefully and the second takes everything. No occurrence of any
//! object runs twice, with the API server's `shardSelector` and with client-side filtering.
//!
//! The schedule is every 5 s (not every second) so that the check is deterministic: a
//! handover without the wait takes well under the write's delay (3 s), so the second member's
//! catch-up falls into the period of the occurrence whose record is still on its way.

mod operator_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{ShardWatch, Sharding, shard_of};
use kopf_runtime::{Data, Occurrence, Operator, timer};
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{TestNamespace, test_config, wait_until};
use operator_common::*;

/// Which member a handler runs in.
#[derive(Debug, Clone)]
struct Member(&'static str);

/// How long the first member's writes of the objects take at its proxy (under the writes'
/// deadline, see [`sharding`]).
const SLOW_WRITE: Duration = Duration::from_secs(3);

#[timer(id = "shard-cron", cron = "*/5 * * * * *", missed = "run_once")]
async fn shard_cron(
    obj: Arc<KopfExample>,
    occurrence: Occurrence,
    journal: Data<Journal>,
    member: Data<Member>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, format!("{} by {}", occurrence.0, member.0));
}

/// A 10 s lease and a 4 s renew deadline: their margin (6 s) sets the writes' deadline to
/// 4.5 s, above [`SLOW_WRITE`]; a 0.3 s retry period, so that handovers are quick.
fn sharding(ns: &TestNamespace, identity: &str, mode: ShardWatch) -> Sharding {
    Sharding::new("kopf-tests-shard-cron", ns.name())
        .lease_duration(Duration::from_secs(10))
        .renew_deadline(Duration::from_secs(4))
        .retry_period(Duration::from_millis(300))
        .identity(identity)
        .watch(mode)
}

/// A member whose requests go through `config` when given.
async fn member(
    ns: &TestNamespace,
    name: &'static str,
    journal: &Journal,
    mode: ShardWatch,
    config: Option<kube::Config>,
) -> anyhow::Result<Operator> {
    let mut builder = operator(ns, &["shard-cron"]).await?;
    if let Some(config) = config {
        builder = builder.kube_config(config);
    }
    Ok(builder
        .data(journal.clone())
        .data(Member(name))
        .sharding(sharding(ns, name, mode))
        .start()
        .await?)
}

/// The runs of `name`: occurrence → the members that ran it, in order.
fn runs(journal: &Journal, name: &str) -> BTreeMap<String, Vec<String>> {
    let mut runs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in journal.of(name) {
        if let Some((occurrence, who)) = event.split_once(" by ") {
            runs.entry(occurrence.to_owned())
                .or_default()
                .push(who.to_owned());
        }
    }
    runs
}

/// How many occurrences of `name` `who` ran.
fn ran_by(journal: &Journal, name: &str, who: &str) -> usize {
    let runs = runs(journal, name).into_values();
    runs.filter(|by| by.iter().any(|b| b == who)).count()
}

/// Fails if an occurrence of an object ran twice.
fn assert_each_occurrence_once(journal: &Journal, names: &[String]) {
    for name in names {
        let twice: Vec<_> = runs(journal, name)
            .into_iter()
            .filter(|(_, by)| by.len() > 1)
            .collect();
        assert!(twice.is_empty(), "{name}: ran twice: {twice:?}");
    }
}

/// Which member's range each object is in, for two members `a` < `b`: `a` holds 0‥511.
fn owner(uid: &str) -> &'static str {
    if shard_of(uid) < 512 { "a" } else { "b" }
}

/// Waits until `who` has run `more` occurrences of each of `names` beyond `before`.
async fn wait_runs(journal: &Journal, names: &[String], who: &str, more: usize) {
    let before: Vec<usize> = names.iter().map(|n| ran_by(journal, n, who)).collect();
    let what = format!("{who} runs {more} more occurrence(s) of {names:?}");
    // Occurrences come every 5 s; a handover adds a few seconds.
    let deadline = PROMPTLY + Duration::from_secs(5) * u32::try_from(more).unwrap_or(1);
    wait_until(&what, deadline, || async {
        (names.iter().zip(&before)).all(|(n, b)| ran_by(journal, n, who) >= b + more)
    })
    .await;
}

#[tokio::test]
async fn no_cron_occurrence_runs_twice_across_a_sharding_handover() -> anyhow::Result<()> {
    handover(ShardWatch::Auto).await
}

#[tokio::test]
async fn no_cron_occurrence_runs_twice_across_a_client_side_handover() -> anyhow::Result<()> {
    handover(ShardWatch::ClientSide).await
}

async fn handover(mode: ShardWatch) -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = FaultProxy::start(&test_config().await?).await?;
    let journal = Journal::default();
    let a = member(&ns, "a", &journal, mode, Some(proxy.config())).await?;
    let mut by_owner: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for i in 0..12 {
        let name = format!("c{i}");
        let created = create(&api, &name, "x").await?;
        let uid = created.metadata.uid.clone().unwrap_or_default();
        by_owner.entry(owner(&uid)).or_default().push(name);
    }
    let names: Vec<String> = by_owner.values().flatten().cloned().collect();
    let (a_names, b_names) = (&by_owner["a"], &by_owner["b"]);
    assert!(!a_names.is_empty() && !b_names.is_empty(), "{by_owner:?}");
    wait_runs(&journal, &names, "a", 1).await;
    // From now on a's writes of the objects (the cron records) take 3 s to reach the server.
    let slow = Match::method(http::Method::PATCH).path("/kopfexamples/");
    proxy
        .handle()
        .inject(Rule::new(slow.clone(), Fault::Delay(SLOW_WRITE)));
    // Right after a ran an occurrence (its records on their way), b joins and takes its share.
    wait_runs(&journal, &names, "a", 1).await;
    let b = member(&ns, "b", &journal, mode, None).await?;
    wait_runs(&journal, b_names, "b", 1).await;
    let stats = b.stats().sharding.expect("sharding is on");
    assert_eq!(stats.ranges, "512-1023");
    // Positive controls: the records were slowed down; a still runs its own share.
    assert!(proxy.handle().count(&slow) > 0);
    wait_runs(&journal, a_names, "a", 1).await;
    assert_each_occurrence_once(&journal, &names);
    // A graceful exit hands a's share over: its records are written before its ranges go.
    a.shutdown().await;
    wait_runs(&journal, a_names, "b", 1).await;
    assert_each_occurrence_once(&journal, &names);
    for name in &names {
        assert!(ran_by(&journal, name, "a") >= 2, "{:?}", journal.of(name));
    }
    b.shutdown().await;
    proxy.stop().await;
    ns.cleanup().await?;
    Ok(())
}
