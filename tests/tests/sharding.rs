//! Sharding against the real API server, with members in one process (each its own operator
//! with its own clients): two members split the objects by the hash of their UIDs, a joining
//! member takes its share only after the holder stopped it, a graceful exit hands every range
//! over, in both watch modes; and the settings that cannot work are refused. The multi-process
//! proof (crashes, cuts, scale 1 → 3 → 1) is `shard_process.rs`.

mod operator_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{LeaderElection, ShardWatch, Sharding, shard_of};
use kopf_runtime::{Data, Operator, OperatorError, Stopper, daemon};
use kopf_tests::{TestNamespace, wait_until};
use kube::api::Api;
use operator_common::*;

/// Which member a handler runs in.
#[derive(Debug, Clone)]
struct Member(&'static str);

#[daemon(id = "shard-daemon", cancellation_backoff = "5s")]
async fn shard_daemon(
    obj: Arc<KopfExample>,
    stopper: Stopper,
    journal: Data<Journal>,
    member: Data<Member>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, format!("started by {}", member.0));
    stopper.stopped().await;
    journal.record(&name, format!("stopped by {}", member.0));
}

/// Short settings: 2 s lease, 1.5 s renew deadline, 0.3 s retry.
fn sharding(ns: &TestNamespace, identity: &str, mode: ShardWatch) -> Sharding {
    Sharding::new("kopf-tests-shards", ns.name())
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(300))
        .identity(identity)
        .watch(mode)
}

async fn member(
    ns: &TestNamespace,
    name: &'static str,
    journal: &Journal,
    mode: ShardWatch,
) -> anyhow::Result<Operator> {
    Ok(operator(ns, &["shard-daemon"])
        .await?
        .health_addr(([127, 0, 0, 1], 0).into())
        .data(journal.clone())
        .data(Member(name))
        .sharding(sharding(ns, name, mode))
        .start()
        .await?)
}

/// Fails if two members ran the daemon of `name` at the same time, or one never stopped
/// before another started.
fn assert_no_overlap(journal: &Journal, name: &str) {
    let mut runs: Vec<(Instant, bool, String)> = journal
        .timed(name)
        .into_iter()
        .filter_map(|(event, at)| {
            let (what, who) = event.split_once(" by ")?;
            Some((at, what == "started", who.to_owned()))
        })
        .collect();
    runs.sort_by_key(|(at, _, _)| *at);
    let mut running: Option<String> = None;
    for (_, started, who) in runs {
        match (started, &running) {
            (true, None) => running = Some(who),
            (true, Some(other)) => panic!(
                "{name}: {who} started while {other} ran: {:?}",
                journal.of(name)
            ),
            (false, Some(r)) if *r == who => running = None,
            (false, _) => panic!(
                "{name}: {who} stopped what it did not run: {:?}",
                journal.of(name)
            ),
        }
    }
}

/// Which member's range each object is in, for two members `a` < `b`: `a` holds 0‥511.
fn expected_owner(uid: &str) -> &'static str {
    if shard_of(uid) < 512 { "a" } else { "b" }
}

async fn split_and_hand_over(mode: ShardWatch) -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let a = member(&ns, "a", &journal, mode).await?;
    let names: Vec<String> = (0..24).map(|i| format!("s{i}")).collect();
    let mut uids = BTreeMap::new();
    for name in &names {
        let created = create(&api, name, "x").await?;
        uids.insert(
            name.clone(),
            created.metadata.uid.clone().unwrap_or_default(),
        );
    }
    for name in &names {
        journal.wait_for(name, "started by a", 1).await;
    }
    let stats = a.stats().sharding.expect("sharding is on");
    assert_eq!((stats.held, stats.ranges.as_str()), (1024, "0-1023"));
    // A second member joins: a stops b's share first, then b starts it.
    let b = member(&ns, "b", &journal, mode).await?;
    for (name, uid) in &uids {
        if expected_owner(uid) == "b" {
            journal.wait_for(name, "started by b", 1).await;
        }
    }
    wait_until("a serves 0-511", PROMPTLY, || async {
        a.stats().sharding.is_some_and(|m| m.ranges == "0-511")
    })
    .await;
    let b_stats = b.stats().sharding.expect("sharding is on");
    assert_eq!(b_stats.ranges, "512-1023");
    assert_eq!(b_stats.members, vec!["a".to_owned(), "b".to_owned()]);
    let used = if mode == ShardWatch::ClientSide {
        ShardWatch::ClientSide
    } else {
        ShardWatch::Server
    };
    assert_eq!(b_stats.watch, Some(used));
    let b_objects = uids
        .values()
        .filter(|uid| expected_owner(uid) == "b")
        .count();
    assert_eq!(b_stats.objects, b_objects);
    let (code, body) = probe(b.health_addr().expect("a probe address"), "/readyz").await?;
    assert_eq!(code, 200, "{body}");
    let line = format!("shard member b: ranges 512-1023 (512 of 1024), {b_objects} objects");
    assert!(body.contains(&line), "{body}");
    // A moved daemon restarts within the stop ladder (immediate here) and a fraction of the
    // retry period (0.3 s): the holder releases as soon as its handlers stopped, the new
    // holder looks four times per period while it waits.
    let mut gaps: Vec<Duration> = Vec::new();
    for (name, uid) in &uids {
        if expected_owner(uid) == "b" {
            let stopped = journal.instants(name, "stopped by a")[0];
            let started = journal.instants(name, "started by b")[0];
            gaps.push(started.saturating_duration_since(stopped));
        }
    }
    let worst = gaps.iter().max().copied().unwrap_or_default();
    eprintln!(
        "{mode:?}: {} daemons moved, the longest gap {worst:?}",
        gaps.len()
    );
    assert!(
        worst < Duration::from_secs(1) + Duration::from_secs(1),
        "gaps {gaps:?}"
    );
    for (name, uid) in &uids {
        assert_no_overlap(&journal, name);
        // Positive control: a's objects were not touched, b's moved exactly once.
        let moved = usize::from(expected_owner(uid) == "b");
        assert_eq!(
            journal.count(name, "started by b"),
            moved,
            "{name}: {:?}",
            journal.of(name)
        );
        assert_eq!(journal.count(name, "started by a"), 1);
        assert_eq!(journal.count(name, "stopped by a"), moved);
    }
    // Graceful exit of a: its ranges pass to b at once.
    let exit = Instant::now();
    a.shutdown().await;
    for (name, uid) in &uids {
        if expected_owner(uid) == "a" {
            journal.wait_for(name, "started by b", 1).await;
        }
        assert_no_overlap(&journal, name);
    }
    let handed = exit.elapsed();
    assert!(
        handed < Duration::from_secs(5) + Duration::from_secs(1),
        "{handed:?}"
    );
    wait_until("b serves everything", PROMPTLY, || async {
        b.stats().sharding.is_some_and(|m| m.held == 1024)
    })
    .await;
    // b serves deletions of objects it took over: finalizers removed, objects gone.
    for name in names.iter().take(6) {
        delete(&api, name).await?;
    }
    for name in names.iter().take(6) {
        wait_gone(&api, name).await;
    }
    b.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn members_split_the_objects_and_hand_over_without_overlap() -> anyhow::Result<()> {
    split_and_hand_over(ShardWatch::Auto).await
}

#[tokio::test]
async fn client_side_members_split_the_objects_too() -> anyhow::Result<()> {
    split_and_hand_over(ShardWatch::ClientSide).await
}

#[tokio::test]
async fn sharding_settings_that_cannot_work_are_refused() -> anyhow::Result<()> {
    let (ns, _api): (TestNamespace, Api<KopfExample>) = example_namespace().await?;
    let both = operator(&ns, &["shard-daemon"])
        .await?
        .sharding(sharding(&ns, "a", ShardWatch::Auto))
        .leader_election(LeaderElection::new("x", ns.name()))
        .start()
        .await;
    let err = both.expect_err("sharding and leader election together");
    assert!(matches!(err, OperatorError::InvalidOption { .. }), "{err}");
    assert!(err.to_string().contains("leader_election"), "{err}");
    let bad_name = operator(&ns, &["shard-daemon"])
        .await?
        .sharding(Sharding::new("not a label!", ns.name()))
        .start()
        .await;
    let err = bad_name.expect_err("an invalid group name");
    assert!(err.to_string().contains("label value"), "{err}");
    ns.cleanup().await?;
    Ok(())
}
