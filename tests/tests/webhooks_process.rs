//! Two replicas serving admission reviews (separate processes, against the real API server),
//! behind a balancer in front of both as a Service would be: they share the CA one of them
//! made (both started at once, so they race to make it), each presents a certificate under it,
//! and when one is killed (SIGKILL) or stopped (SIGTERM) in the middle of admission traffic,
//! every request is still answered as the handler says: none fails.
//!
//! No libtest harness: this binary is both the test (the parent) and, when
//! `KOPF_WH_CHILD` is set, one replica (a child).

mod operator_common;
mod process_common;

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::{Operator, Rejection, Webhooks, validate};
use kopf_tests::{free_port, test_config};
use kube::api::{Api, DeleteParams, PostParams};
use operator_common::*;
use process_common::{Child, run_child, run_tests};
use tokio::net::{TcpListener, TcpStream};

/// `<namespace>:<listen port>:<balancer port>`: run as a replica.
const CHILD_ENV: &str = "KOPF_WH_CHILD";

/// Refuses `spec.field: forbidden`.
#[validate(id = "whp-field")]
fn field_allowed(obj: &KopfExample) -> Result<(), Rejection> {
    match obj.spec.field.as_deref() {
        Some("forbidden") => Err(Rejection::new("spec.field must not be \"forbidden\"")),
        _ => Ok(()),
    }
}

fn operator_name(namespace: &str) -> String {
    format!("whp-{namespace}")
}

/// A replica: listens on its own port, configured behind the balancer, until SIGTERM.
fn child(spec: &str) -> ExitCode {
    run_child(async {
        let mut parts = spec.split(':');
        let (Some(ns), Some(port), Some(balancer)) = (parts.next(), parts.next(), parts.next())
        else {
            anyhow::bail!("bad {CHILD_ENV}: {spec}");
        };
        let port: u16 = port.parse()?;
        let settings = Webhooks::url(format!("https://127.0.0.1:{balancer}"))
            .listen(([127, 0, 0, 1], port).into())
            .ca_secret(ns, "whp-ca")
            .handlers(["whp-field"]);
        Operator::builder()
            .name(operator_name(ns))
            .kube_config(test_config().await?)
            .namespaces([ns])
            .webhooks(settings)
            .shutdown_timeout(Duration::from_secs(5))
            .run()
            .await?;
        Ok(())
    })
}

/// A TCP balancer on `listener`: each connection goes to the next backend that accepts it, as
/// kube-proxy sends a Service's connections to its ready endpoints.
fn balance(listener: TcpListener, backends: Vec<u16>) -> tokio::task::JoinHandle<()> {
    let next = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let (backends, next) = (backends.clone(), next.clone());
            tokio::spawn(async move {
                let first = next.fetch_add(1, Ordering::Relaxed);
                for i in 0..backends.len() {
                    let port = backends[(first + i) % backends.len()];
                    if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", port)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        return;
                    }
                }
            });
        }
    })
}

fn example(name: &str, field: &str) -> KopfExample {
    let spec = KopfExampleSpec {
        field: Some(field.to_owned()),
        ..KopfExampleSpec::default()
    };
    KopfExample::new(name, spec)
}

/// Whether something listens on `port`.
async fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).await.is_ok()
}

/// Admissions one at a time until `stop`, counting those answered as the handler says in
/// `answered`; returns the others.
async fn traffic(
    api: Api<KopfExample>,
    stop: tokio_util::sync::CancellationToken,
    answered: Arc<AtomicUsize>,
) -> Vec<String> {
    let post = PostParams::default();
    let mut failed = Vec::new();
    let mut n = 0_usize;
    while !stop.is_cancelled() {
        match api.create(&post, &example("refused", "forbidden")).await {
            Err(kube::Error::Api(s)) if s.message.contains("must not be \"forbidden\"") => {
                answered.fetch_add(1, Ordering::Relaxed);
            }
            other => failed.push(format!("{other:?}")),
        }
        n += 1;
        match api
            .create(&post, &example(&format!("fine-{n}"), "fine"))
            .await
        {
            Ok(_) => {
                answered.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => failed.push(e.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    failed
}

/// What a request in flight to a killed replica may get: the API server's refusal under the
/// failure policy `Fail` (the handler's answer never came). Never an admission.
fn refused_by_the_failure_policy(failure: &str) -> bool {
    failure.contains("failed calling webhook") && failure.contains("code: 500")
}

/// Starts both replicas at once; kills or stops one (`signal`) in the middle of traffic.
async fn one_replica_ends_mid_traffic(signal: &str) -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let (p1, p2) = (free_port(), free_port());
    let front = TcpListener::bind("127.0.0.1:0").await?;
    let front_port = front.local_addr()?.port();
    let balancer = balance(front, vec![p1, p2]);
    let output = std::env::temp_dir().join(format!("whp-{}.log", ns.name()));
    let spawn = |port: u16| {
        let spec = format!("{}:{port}:{front_port}", ns.name());
        Child::spawn(&[(CHILD_ENV, OsString::from(spec))], &output)
    };
    let (mut first, mut second) = (spawn(p1)?, spawn(p2)?);
    let deadline = Instant::now() + PROMPTLY;
    while !(listening(p1).await && listening(p2).await) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the replicas never listened; see {output:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Both present a certificate under the one CA (they raced to make it).
    let secrets: Api<Secret> = ns.api();
    let ca = secrets.get("whp-ca").await?.data.unwrap_or_default()["ca.crt"]
        .0
        .clone();
    for port in [p1, p2] {
        handshake(port, &ca).await?;
    }
    let post = PostParams::default();
    while api
        .create(&post, &example("probe", "forbidden"))
        .await
        .is_ok()
    {
        api.delete("probe", &DeleteParams::default()).await?;
        anyhow::ensure!(Instant::now() < deadline, "the webhook never took effect");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let stop = tokio_util::sync::CancellationToken::new();
    let answered = Arc::new(AtomicUsize::new(0));
    let load = tokio::spawn(traffic(api.clone(), stop.clone(), answered.clone()));
    // At least 10 admissions before, 20 after the signal (and 3 s at the least after it).
    let at_least = |n: usize, what: &'static str| {
        let answered = answered.clone();
        kopf_tests::wait_until(what, PROMPTLY, move || {
            let answered = answered.clone();
            async move { answered.load(Ordering::Relaxed) >= n }
        })
    };
    at_least(10, "10 admissions before the signal").await;
    let before = answered.load(Ordering::Relaxed);
    first.signal(signal).await?;
    // Positive control: the first replica really stopped listening while traffic went on.
    let deadline = Instant::now() + PROMPTLY;
    while listening(p1).await {
        anyhow::ensure!(Instant::now() < deadline, "the first replica still listens");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    at_least(before + 20, "20 admissions after the signal").await;
    stop.cancel();
    let failed = load.await?;
    let after = answered.load(Ordering::Relaxed) - before;
    println!(
        "{signal}: {before} admissions answered before, {after} after, {} failed: {failed:?}",
        failed.len()
    );
    anyhow::ensure!(before >= 10 && after >= 20, "too little traffic to tell");
    if signal == "-KILL" {
        // One request is in flight at a time: at most that one meets the killed replica.
        anyhow::ensure!(failed.len() <= 1, "failed admissions: {failed:?}");
        let unexpected: Vec<_> = (failed.iter())
            .filter(|f| !refused_by_the_failure_policy(f))
            .collect();
        anyhow::ensure!(
            unexpected.is_empty(),
            "beyond the failure policy: {unexpected:?}"
        );
    } else {
        anyhow::ensure!(failed.is_empty(), "failed admissions: {failed:?}");
    }

    let _exit = first.exit_code(Duration::from_secs(15)).await;
    second.signal("-TERM").await?;
    let _exit = second.exit_code(Duration::from_secs(15)).await;
    balancer.abort();
    kopf_tests::remove_webhook_configurations(&client().await, &operator_name(ns.name())).await?;
    ns.cleanup().await?;
    Ok(())
}

/// A TLS handshake with the replica on `port`, trusting only `ca` (PEM) for 127.0.0.1.
async fn handshake(port: u16, ca: &[u8]) -> anyhow::Result<()> {
    kopf_tests::webhook_tls(port, ca).await?;
    Ok(())
}

fn main() -> ExitCode {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
    run_tests(&[
        ("a_replica_killed_mid_traffic_fails_no_admission", || {
            Box::pin(one_replica_ends_mid_traffic("-KILL"))
        }),
        ("a_replica_stopped_mid_traffic_fails_no_admission", || {
            Box::pin(one_replica_ends_mid_traffic("-TERM"))
        }),
    ])
}
