//! The `tcp_health` example (`kopf-examples/src/bin/tcp_health.rs`) against the real API server
//! and a real TCP endpoint on loopback: the daemon mirrors the endpoint's lines into
//! `status.health`, flushing periodically while it runs, notices the endpoint going away, and
//! stops at once when its object is deleted.

mod operator_common;
#[allow(dead_code, unreachable_pub)]
#[path = "../../kopf-examples/src/bin/tcp_health.rs"]
mod tcp_health;

use std::time::{Duration, Instant};

use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kube::api::{Api, PostParams};
use operator_common::{PROMPTLY, create, delete, example_namespace, operator, status};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;

async fn health(api: &Api<KopfExample>, name: &str) -> Value {
    status(api, name)
        .await
        .get("health")
        .cloned()
        .unwrap_or_default()
}

/// An "external process": writes `ok` every 100 ms to whoever connects, until aborted.
async fn endpoint() -> anyhow::Result<(String, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let task = tokio::spawn(async move {
        // Aborting this task drops the set, which aborts (and closes) every connection.
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            connections.spawn(async move {
                while socket.write_all(b"ok\n").await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
        }
    });
    Ok((addr, task))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_mirrors_the_endpoint_into_status() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let (addr, server) = endpoint().await?;
    let op = operator(&ns, &["tcp_health"]).await?.start().await?;
    create(&api, "mirrored", &addr).await?;
    let bare = KopfExample::new("no-endpoint", KopfExampleSpec::default());
    api.create(&PostParams::default(), &bare).await?;
    kopf_tests::wait_until("status.health: connected, state ok", PROMPTLY, || async {
        let h = health(&api, "mirrored").await;
        h["connected"] == json!(true) && h["state"] == json!("ok") && h["lines"].as_u64() > Some(0)
    })
    .await;
    let first = health(&api, "mirrored").await["lines"]
        .as_u64()
        .unwrap_or(0);
    // Periodic flushes while the daemon keeps running: the line count grows in status.
    kopf_tests::wait_until("status.health.lines to grow", PROMPTLY, || async {
        health(&api, "mirrored").await["lines"]
            .as_u64()
            .unwrap_or(0)
            > first
    })
    .await;
    // The object without `spec.field` got no daemon (the other one, created with it, did).
    assert_eq!(health(&api, "no-endpoint").await, Value::Null);

    // The external process goes away: the daemon notices and says so.
    server.abort();
    kopf_tests::wait_until("status.health: disconnected", PROMPTLY, || async {
        let h = health(&api, "mirrored").await;
        h["connected"] == json!(false) && h["disconnects"] == json!(1) && h["error"].is_string()
    })
    .await;

    // Deletion: the daemon awaits its stop flag next to the socket, so it exits at once.
    let deleted = Instant::now();
    delete(&api, "mirrored").await?;
    operator_common::wait_gone(&api, "mirrored").await;
    assert!(deleted.elapsed() < PROMPTLY);
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
