//! What others can write into a sharded group's Leases does not freeze the group, against the
//! real API server, with two members in one process: a garbled claims annotation is repaired
//! (every daemon restarts once, never beside another instance, and a warning names the Lease);
//! a forged member Lease with a huge duration loses its ranges within a bound; a member's graceful
//! exit deletes its Lease, and a long-expired member Lease is garbage-collected.

mod operator_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{ShardWatch, Sharding};
use kopf_runtime::{Data, Operator, Stopper, daemon};
use kopf_tests::{TestNamespace, wait_until};
use kube::api::{Api, ObjectMeta, PostParams};
use operator_common::*;

const GROUP: &str = "kopf-garbage";
const CLAIMS: &str = "kopf.dev/shard-claims";

/// Which member a handler runs in.
#[derive(Debug, Clone)]
struct Member(&'static str);

#[daemon(id = "garbage-daemon")]
async fn garbage_daemon(
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
async fn member(
    ns: &TestNamespace,
    name: &'static str,
    journal: &Journal,
) -> anyhow::Result<Operator> {
    let sharding = Sharding::new(GROUP, ns.name())
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(300))
        .identity(name)
        .watch(ShardWatch::ClientSide);
    Ok(operator(ns, &["garbage-daemon"])
        .await?
        .data(journal.clone())
        .data(Member(name))
        .sharding(sharding)
        .start()
        .await?)
}

/// Fails if two members ran the daemon of `name` at the same time.
fn assert_no_overlap(journal: &Journal, name: &str) {
    let mut running: Option<String> = None;
    for event in journal.of(name) {
        let Some((what, who)) = event.split_once(" by ") else {
            continue;
        };
        match (what, &running) {
            ("started", None) => running = Some(who.to_owned()),
            ("started", Some(other)) => {
                panic!(
                    "{name}: {who} started while {other} ran: {:?}",
                    journal.of(name)
                )
            }
            ("stopped", Some(r)) if r == who => running = None,
            _ => panic!(
                "{name}: {who} stopped what it did not run: {:?}",
                journal.of(name)
            ),
        }
    }
}

/// Whether the daemon of `name` runs now (its last event is a start).
fn running(journal: &Journal, name: &str) -> bool {
    journal
        .of(name)
        .last()
        .is_some_and(|e| e.starts_with("started"))
}

/// The ranges of `text` (`0-340,682-1023`), if valid.
fn ranges(text: &str) -> Option<Vec<u16>> {
    let mut all = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (start, end) = part.split_once('-').unwrap_or((part, part));
        let (start, end): (u16, u16) = (start.parse().ok()?, end.parse().ok()?);
        if start > end || end >= 1024 {
            return None;
        }
        all.extend(start..=end);
    }
    Some(all)
}

/// Whether the group's claims are valid and hold every range exactly once, with no quarantine.
async fn claims_complete(leases: &Api<Lease>) -> bool {
    let Ok(group) = leases.get(GROUP).await else {
        return false;
    };
    let annotations = group.metadata.annotations.unwrap_or_default();
    if annotations.keys().any(|k| k.contains("quarantine")) {
        return false;
    }
    let Some(text) = annotations.get(CLAIMS) else {
        return false;
    };
    let Ok(claims) = serde_json::from_str::<BTreeMap<String, String>>(text) else {
        return false;
    };
    let mut seen = vec![0u8; 1024];
    for held in claims.values() {
        let Some(held) = ranges(held) else {
            return false;
        };
        held.into_iter().for_each(|r| seen[usize::from(r)] += 1);
    }
    seen.iter().all(|n| *n == 1)
}

/// Whether the claims are complete and do not name `member`.
async fn claims_complete_without(leases: &Api<Lease>, member: &str) -> bool {
    let Ok(group) = leases.get(GROUP).await else {
        return false;
    };
    let annotations = group.metadata.annotations.unwrap_or_default();
    let named = annotations.get(CLAIMS).is_some_and(|c| c.contains(member));
    !named && claims_complete(leases).await
}

/// Sets the group's claims annotation to `text` (retried on conflicts).
async fn set_claims(leases: &Api<Lease>, text: &str) -> anyhow::Result<()> {
    for _ in 0..20 {
        let mut group = leases.get(GROUP).await?;
        (group.metadata.annotations.get_or_insert_with(BTreeMap::new))
            .insert(CLAIMS.to_owned(), text.to_owned());
        match leases.replace(GROUP, &PostParams::default(), &group).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(err) => return Err(err.into()),
        }
    }
    anyhow::bail!("the group's Lease kept changing")
}

/// A Lease of the group for `member`, as a member writes it, held by `holder`.
fn member_lease(name: &str, member: &str, holder: Option<&str>, seconds: i32) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(
                "kopf.dev/shard-group".to_owned(),
                GROUP.to_owned(),
            )])),
            annotations: Some(BTreeMap::from([(
                "kopf.dev/shard-member".to_owned(),
                member.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(seconds),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..LeaseSpec::default()
        }),
    }
}

/// Creates `count` objects and waits until each one's daemon runs.
async fn objects(
    api: &Api<KopfExample>,
    journal: &Journal,
    count: usize,
) -> anyhow::Result<Vec<String>> {
    let names: Vec<String> = (0..count).map(|i| format!("g{i}")).collect();
    for name in &names {
        create(api, name, "x").await?;
    }
    for name in &names {
        wait_until(format!("{name} runs"), PROMPTLY, || async {
            running(journal, name)
        })
        .await;
    }
    Ok(names)
}

#[tokio::test]
async fn a_garbled_claims_annotation_is_repaired_without_overlap() -> anyhow::Result<()> {
    let logs = Logs::installed();
    let (ns, api) = example_namespace().await?;
    let leases: Api<Lease> = Api::namespaced(client().await, ns.name());
    let journal = Journal::default();
    let a = member(&ns, "a", &journal).await?;
    let b = member(&ns, "b", &journal).await?;
    let names = objects(&api, &journal, 16).await?;
    wait_until("the claims are split", PROMPTLY, || {
        claims_complete(&leases)
    })
    .await;
    let garbage = [
        "not json {",
        r#"{"a":"0-600","b":"500-1023"}"#,
        r#"{"a":"0-2000","b":"x"}"#,
    ];
    // Each kind twice: two members race to repair each time.
    for text in garbage.iter().chain(&garbage).copied() {
        let starts: usize = names.iter().map(|n| journal.of(n).len()).sum();
        set_claims(&leases, text).await?;
        let garbled = Instant::now();
        // Within a few retry periods and the (immediate) stop ladders: valid claims again.
        let bound = Duration::from_secs(6) + Duration::from_secs(1);
        wait_until(format!("the claims {text} are repaired"), bound, || {
            claims_complete(&leases)
        })
        .await;
        for name in &names {
            wait_until(format!("{name} runs after {text}"), bound, || async {
                running(&journal, name)
            })
            .await;
            assert_no_overlap(&journal, name);
        }
        let (held_a, held_b) = (a.stats().sharding, b.stats().sharding);
        let held = held_a.map_or(0, |m| m.held) + held_b.map_or(0, |m| m.held);
        assert_eq!(held, 1024, "{text}");
        // Positive control: the repair restarted the daemons (nothing trusted the garbage).
        let after: usize = names.iter().map(|n| journal.of(n).len()).sum();
        assert!(after > starts, "{text}: nothing restarted");
        eprintln!("{text}: repaired in {:?}", garbled.elapsed());
    }
    // Claims of a member without a Lease: it counts as expired once unseen for a lease
    // duration, and its ranges pass on.
    set_claims(&leases, r#"{"ghost":"0-1023"}"#).await?;
    let bound = Duration::from_secs(2 + 3) + Duration::from_secs(1);
    wait_until("the ghost's claims pass on", bound, || {
        claims_complete_without(&leases, "ghost")
    })
    .await;
    for name in &names {
        wait_until(format!("{name} runs after the ghost"), bound, || async {
            running(&journal, name)
        })
        .await;
        assert_no_overlap(&journal, name);
    }
    let ghost = logs.lines_with("member=ghost");
    let ghost: Vec<&String> = ghost.iter().filter(|l| l.contains(ns.name())).collect();
    assert!((1..=2).contains(&ghost.len()), "{ghost:#?}");
    // One warning per member and write of garbage, naming the Lease.
    let needle = format!("{}/{GROUP}", ns.name());
    let warnings: Vec<String> = logs
        .lines_with(&needle)
        .into_iter()
        .filter(|l| l.contains("WARN") && l.contains("garbled") && !l.contains("ghost"))
        .collect();
    assert!(
        (2 * garbage.len()..=4 * garbage.len()).contains(&warnings.len()),
        "{warnings:#?}"
    );
    a.shutdown().await;
    b.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_forged_member_lease_with_a_huge_duration_loses_its_ranges() -> anyhow::Result<()> {
    let logs = Logs::installed();
    let (ns, api) = example_namespace().await?;
    let leases: Api<Lease> = Api::namespaced(client().await, ns.name());
    let pp = PostParams::default();
    let mut group = Lease::default();
    group.metadata.name = Some(GROUP.to_owned());
    group.metadata.annotations = Some(BTreeMap::from([(
        CLAIMS.to_owned(),
        r#"{"ghost":"0-1023"}"#.to_owned(),
    )]));
    leases.create(&pp, &group).await?;
    let forged = member_lease("kopf-garbage-ghost", "ghost", Some("ghost"), 1_000_000);
    leases.create(&pp, &forged).await?;
    let journal = Journal::default();
    let started = Instant::now();
    let a = member(&ns, "a", &journal).await?;
    let b = member(&ns, "b", &journal).await?;
    let names: Vec<String> = (0..12).map(|i| format!("g{i}")).collect();
    for name in &names {
        create(&api, name, "x").await?;
    }
    // The ghost is trusted for at most 4 lease durations (8 s), then its ranges pass on.
    let bound = Duration::from_secs(8) + Duration::from_secs(4);
    for name in &names {
        let left = bound
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(1));
        wait_until(format!("{name} runs"), left, || async {
            running(&journal, name)
        })
        .await;
    }
    eprintln!(
        "the ghost's objects served {:?} after the start",
        started.elapsed()
    );
    wait_until("the claims are split", PROMPTLY, || {
        claims_complete(&leases)
    })
    .await;
    let text = leases
        .get(GROUP)
        .await?
        .metadata
        .annotations
        .unwrap_or_default();
    assert!(
        !text.get(CLAIMS).is_some_and(|c| c.contains("ghost")),
        "{text:?}"
    );
    for name in &names {
        assert_no_overlap(&journal, name);
        assert_eq!(journal.of(name).len(), 1, "{name}: {:?}", journal.of(name));
    }
    let warnings = logs.lines_with("kopf-garbage-ghost");
    assert!(
        warnings
            .iter()
            .any(|l| l.contains("WARN") && l.contains("longer duration")),
        "{warnings:#?}"
    );
    a.shutdown().await;
    b.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn member_leases_are_deleted_at_exit_and_collected_when_long_expired() -> anyhow::Result<()> {
    let (ns, _api) = example_namespace().await?;
    let leases: Api<Lease> = Api::namespaced(client().await, ns.name());
    let journal = Journal::default();
    let a = member(&ns, "a", &journal).await?;
    let b = member(&ns, "b", &journal).await?;
    let exists = |name: &'static str| {
        let leases = leases.clone();
        async move { leases.get_opt(name).await.ok().flatten().is_some() }
    };
    wait_until("both Leases exist", PROMPTLY, || async {
        exists("kopf-garbage-a").await && exists("kopf-garbage-b").await
    })
    .await;
    // An expired member Lease (released), and the same Lease outside the group.
    let pp = PostParams::default();
    leases
        .create(&pp, &member_lease("kopf-garbage-old", "old", None, 1))
        .await?;
    let mut outside = member_lease("kopf-garbage-outside", "outside", None, 1);
    outside.metadata.labels = None;
    leases.create(&pp, &outside).await?;
    let created = Instant::now();
    // A graceful exit deletes the member's own Lease.
    b.shutdown().await;
    let exited = Instant::now();
    wait_until(
        "b's Lease is deleted",
        Duration::from_secs(1) + Duration::from_secs(1),
        || async { !exists("kopf-garbage-b").await },
    )
    .await;
    eprintln!("b's Lease deleted {:?} after its exit", exited.elapsed());
    // Collected once unchanged for 10 lease durations (20 s) on a member's clock, looked at
    // every lease duration.
    let bound = Duration::from_secs(20 + 2 + 2) + Duration::from_secs(5);
    wait_until("the old Lease is collected", bound, || async {
        !exists("kopf-garbage-old").await
    })
    .await;
    eprintln!(
        "the old Lease collected {:?} after its creation",
        created.elapsed()
    );
    assert!(
        exists("kopf-garbage-outside").await,
        "a Lease outside the group was deleted"
    );
    assert!(
        exists("kopf-garbage-a").await,
        "the live member's Lease was deleted"
    );
    assert!(exists(GROUP).await, "the group's Lease was deleted");
    a.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
