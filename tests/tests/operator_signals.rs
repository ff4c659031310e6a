//! The operator as a process: SIGTERM stops every daemon with "operator exiting" and exits 0
//! within the shutdown timeout (leaving finalizers on the objects); a daemon that will not stop
//! is abandoned at the timeout; a second signal exits at once.
//!
//! The operator runs in a child process: this test binary started again with
//! `KOPF_SIGNALS_CHILD` set, running only the `child_operator` test.

mod operator_common;

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kopf_examples::crd::KopfExample;
use kopf_runtime::{LogFormat, Operator, OperatorError, Registry, Stopper, daemon};
use kopf_tests::{TestNamespace, test_config};
use operator_common::*;

const CHILD_ENV: &str = "KOPF_SIGNALS_CHILD";

#[daemon(id = "signals-polite")]
async fn signals_polite(obj: Arc<KopfExample>, stopper: Stopper) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    eprintln!("CHILD daemon {name} started");
    stopper.stopped().await;
    eprintln!("CHILD daemon {name} stopped: {:?}", stopper.reason());
}

/// Ignores its stop flag for a minute (a blocking daemon cannot be cancelled).
#[daemon(id = "signals-stubborn", cancellation_timeout = "60s")]
fn signals_stubborn(obj: Arc<KopfExample>) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    eprintln!("CHILD daemon {name} started");
    std::thread::sleep(Duration::from_secs(60));
}

/// In a child process (`KOPF_SIGNALS_CHILD=<namespace>:<handler>:<shutdown seconds>:<log format>`): runs an
/// operator until signalled. Otherwise: checks that `run` refuses invalid options before it
/// installs any signal handler (so this test binary can still be interrupted).
#[test]
fn child_operator() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        let refused = runtime.block_on(Operator::builder().max_writes_in_flight(0).run());
        assert!(matches!(
            refused,
            Err(OperatorError::InvalidOption {
                option: "max_writes_in_flight",
                ..
            })
        ));
        return Ok(());
    };
    let mut parts = spec.split(':');
    let (ns, handler, seconds) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or("10"),
    );
    let format = if parts.next() == Some("json") {
        LogFormat::Json
    } else {
        LogFormat::Human
    };
    runtime.block_on(async {
        let registry = Registry::from_inventory()?.select(&[handler])?;
        Operator::builder()
            .name("kopf-tests")
            .kube_config(test_config().await?)
            .namespaces([ns])
            .registry(&registry)
            .shutdown_timeout(Duration::from_secs(seconds.parse()?))
            .log_format(format)
            .run()
            .await?;
        eprintln!("CHILD run returned");
        Ok(())
    })
}

/// The child operator and its stderr lines.
struct ChildOperator {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl ChildOperator {
    fn spawn(
        ns: &TestNamespace,
        handler: &str,
        shutdown_seconds: u64,
        format: &str,
    ) -> anyhow::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .args([
                "--exact",
                "child_operator",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                CHILD_ENV,
                format!("{}:{handler}:{shutdown_seconds}:{format}", ns.name()),
            )
            .env("RUST_LOG", "kopf_runtime=info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stderr"))?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            lines,
            seen: Vec::new(),
        })
    }

    /// Waits for a stderr line containing `needle`.
    fn wait_line(&mut self, needle: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.seen.iter().any(|l| l.contains(needle)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => anyhow::bail!(
                    "no line with {needle:?} within {timeout:?}; stderr so far:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
        Ok(())
    }

    fn signal(&self, name: &str) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill -{name} failed");
        Ok(())
    }

    /// Waits for the exit; the exit code and how long it took.
    fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<(Option<i32>, Duration)> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                let took = start.elapsed();
                // Collect the rest of stderr, up to its end (the pipe closes with the process).
                while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(10)) {
                    self.seen.push(line);
                }
                return Ok((status.code(), took));
            }
            if start.elapsed() > timeout {
                self.child.kill()?;
                anyhow::bail!(
                    "the operator did not exit within {timeout:?}; stderr:\n{}",
                    self.seen.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_every_daemon_and_exits_zero_keeping_finalizers() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    for name in ["s1", "s2"] {
        create(&api, name, "a").await?;
    }
    let mut child = ChildOperator::spawn(&ns, "signals-polite", 10, "human")?;
    let start = Duration::from_secs(60);
    child.wait_line("CHILD daemon s1 started", start)?;
    child.wait_line("CHILD daemon s2 started", start)?;
    wait_finalizer(&api, "s1", true).await;
    wait_finalizer(&api, "s2", true).await;

    child.signal("TERM")?;
    let (code, took) =
        tokio::task::block_in_place(|| child.wait_exit(Duration::from_secs(10 + 5)))?;
    assert_eq!(code, Some(0), "stderr:\n{}", child.seen.join("\n"));
    assert!(took < Duration::from_secs(11), "took {took:?}");
    for needle in [
        "received a signal; stopping",
        "CHILD daemon s1 stopped: StopReason(OPERATOR_EXITING)",
        "CHILD daemon s2 stopped: StopReason(OPERATOR_EXITING)",
        "the operator has stopped",
        "CHILD run returned",
    ] {
        assert!(
            child.seen.iter().any(|l| l.contains(needle)),
            "no {needle:?} in:\n{}",
            child.seen.join("\n")
        );
    }
    // Finalizers stay: the daemons resume after a restart.
    wait_finalizer(&api, "s1", true).await;
    wait_finalizer(&api, "s2", true).await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_that_will_not_stop_is_abandoned_at_the_shutdown_timeout() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    create(&api, "stuck", "a").await?;
    let mut child = ChildOperator::spawn(&ns, "signals-stubborn", 3, "json")?;
    child.wait_line("CHILD daemon stuck started", Duration::from_secs(60))?;

    child.signal("TERM")?;
    let (code, took) =
        tokio::task::block_in_place(|| child.wait_exit(Duration::from_secs(3 + 10)))?;
    assert_eq!(code, Some(0), "stderr:\n{}", child.seen.join("\n"));
    assert!(
        took >= Duration::from_secs(2),
        "exited after {took:?}, before the daemon could be abandoned"
    );
    assert!(took < Duration::from_secs(3 + 2), "took {took:?}");
    // JSON logs: one object per line; the summary names the abandoned instance's count.
    let summary = child
        .seen
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["fields"]["message"] == "every daemon and timer has stopped");
    let summary =
        summary.unwrap_or_else(|| panic!("no JSON summary in:\n{}", child.seen.join("\n")));
    assert_eq!(summary["fields"]["abandoned"], 1, "{summary}");
    assert_eq!(summary["level"], "INFO", "{summary}");
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_signal_exits_at_once() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    create(&api, "stuck", "a").await?;
    let mut child = ChildOperator::spawn(&ns, "signals-stubborn", 30, "human")?;
    child.wait_line("CHILD daemon stuck started", Duration::from_secs(60))?;

    child.signal("TERM")?;
    child.wait_line("received a signal; stopping", Duration::from_secs(10))?;
    child.signal("INT")?;
    let (code, took) = tokio::task::block_in_place(|| child.wait_exit(Duration::from_secs(10)))?;
    assert_eq!(code, Some(1), "stderr:\n{}", child.seen.join("\n"));
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert!(
        child
            .seen
            .iter()
            .any(|l| l.contains("received a second signal; exiting at once"))
    );
    ns.cleanup().await?;
    Ok(())
}
