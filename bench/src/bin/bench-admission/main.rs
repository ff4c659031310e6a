//! Scenario 11's servers: one admission check served over TLS, either by a kopf-rs operator's
//! webhook server (`#[validate]`, mode `kopf-rs`) or by a bare axum handler over tokio-rustls,
//! as a kube-rs team wires one by hand (mode `axum`, the reference). Both decode the same
//! `AdmissionReview` of a `KopfExample` and make the same check: `spec.field` names an owner.
//!
//! Both load `tls.crt` and `tls.key` from `CERT_DIR` (made by the harness), listen on an
//! ephemeral loopback port, print `ready <port>` on stdout, and run until SIGTERM. The kopf-rs
//! arm also needs `KUBECONFIG` (the operator's client; it keeps no webhook configuration:
//! the harness calls the server directly). Logging is installed alike in both arms
//! (`kopf_runtime::init_logging`, human lines at INFO); neither logs an admitted review.
//!
//! Usage: `bench-admission MODE CERT_DIR`

mod bare;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use kopf_examples::crd::KopfExample;
use kopf_runtime::{LogFormat, Operator, Rejection, Webhooks, init_logging, validate};
use tokio::signal::unix::{SignalKind, signal};

/// The refusal both arms give an object without an owner.
pub(crate) const NO_OWNER: &str = "spec.field must name the object's owner";

/// The check both arms make: the object names its owner in `spec.field`.
pub(crate) fn owner_named(obj: &KopfExample) -> bool {
    obj.spec
        .field
        .as_deref()
        .is_some_and(|f| !f.trim().is_empty())
}

/// The kopf-rs arm's handler: the check, as a user writes it.
#[validate(id = "owner", operations(create, update))]
fn owner(obj: &KopfExample) -> Result<(), Rejection> {
    if owner_named(obj) {
        Ok(())
    } else {
        Err(Rejection::new(NO_OWNER))
    }
}

/// Any free port on the loopback.
fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Starts a kopf-rs operator that serves only the admission handler; returns it and its port.
async fn kopf_rs(certs: &Path) -> anyhow::Result<(Operator, u16)> {
    let settings = Webhooks::url("https://127.0.0.1")
        .listen(loopback())
        .certificates_from(certs)
        .configuration_managed_by_you()
        .handlers(["owner"]);
    let op = Operator::builder()
        .name("bench-admission")
        .metrics(false)
        .webhooks(settings)
        .start()
        .await
        .context("starting the kopf-rs operator")?;
    let port = op
        .webhook_addr()
        .context("the operator runs no webhook server")?
        .port();
    Ok((op, port))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, dir] = args.as_slice() else {
        bail!("usage: bench-admission kopf-rs|axum CERT_DIR");
    };
    let certs = PathBuf::from(dir);
    init_logging(LogFormat::Human)?;
    let mut term = signal(SignalKind::terminate())?;
    let announce = |port: u16| -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready {port}")?;
        Ok(out.flush()?)
    };
    match mode.as_str() {
        "kopf-rs" => {
            let (op, port) = kopf_rs(&certs).await?;
            announce(port)?;
            term.recv().await;
            op.shutdown().await;
        }
        "axum" => {
            let server = bare::Server::bind(loopback(), &certs).await?;
            announce(server.port())?;
            tokio::select! {
                r = server.serve() => r?,
                _ = term.recv() => {}
            }
        }
        other => bail!("unknown mode {other:?} (kopf-rs or axum)"),
    }
    Ok(())
}
