//! # The kopf-rs demo (`scripts/demo`)
//!
//! Shows daemons and timers doing their job against a real API server, in about a minute:
//!
//! 1. installs the example CRD and creates a namespace of its own (`kopf-demo-*`);
//! 2. starts the demo operator as a child process (this binary, `demo operator`);
//! 3. creates three `KopfExample` objects: each gets a `heartbeat` daemon (beating every 2 s,
//!    flushing `status.heartbeat` every third beat), a sharp `tick` timer (every 3 s) and an
//!    idle `quiet` timer (after 6 s without changes);
//! 4. changes one object's spec: its `quiet` timer waits another 6 s of quiet before firing;
//! 5. deletes one object: its daemon stops gracefully, the finalizer is released at once and
//!    the object disappears;
//! 6. stops the operator with SIGTERM (the remaining daemons stop with "operator exiting"),
//!    cleans up, and prints a summary: daemon starts and stops, timer fires, deletion latency.
//!
//! ## Run it
//!
//! ```text
//! scripts/demo            # starts a local kube-apiserver unless KUBECONFIG is set
//! scripts/demo --check    # the same, unattended: exits non-zero if an expected event is missing
//! ```
//!
//! or, with `KUBECONFIG` pointing at a cluster: `cargo run -p kopf-examples --bin demo`. The
//! demo needs permission to install CRDs and to create and delete a namespace.
//!
//! `demo operator --namespace NS [--json]` runs only the demo operator.

use std::process::ExitCode;

mod handlers;
mod journal;
mod scenario;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.split_first() {
        Some((command, rest)) if command == "operator" => operator(rest).await,
        _ => scenario::run(&args).await,
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("demo: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the demo operator until SIGINT/SIGTERM.
async fn operator(args: &[String]) -> anyhow::Result<ExitCode> {
    let args = kopf_examples::cli::ExampleArgs::parse_from(args.iter().cloned())?;
    args.builder()
        .shutdown_timeout(std::time::Duration::from_secs(15))
        .run()
        .await?;
    Ok(ExitCode::SUCCESS)
}
