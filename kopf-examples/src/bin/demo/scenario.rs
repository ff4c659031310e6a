//! The demo scenario: sets up, drives the operator through creation, a change, a deletion and a
//! shutdown, checks that each expected event happened, cleans up, and prints a summary.

use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tokio::process::Child;
use tokio::time::Instant;

use crate::handlers::IDLE;
use crate::journal::Journal;

/// How long anything that should happen promptly may take (a slow, noisy machine).
const PROMPTLY: Duration = Duration::from_secs(30);
/// The objects the demo creates; the second is changed, the third deleted.
const OBJECTS: [&str; 3] = ["demo-a", "demo-b", "demo-c"];

/// One expected event and whether it happened.
struct Check {
    ok: bool,
}

/// The demo's state.
struct Demo {
    client: Client,
    ns: String,
    api: Api<KopfExample>,
    journal: Journal,
    child: Option<Child>,
    checks: Vec<Check>,
    created_crds: Vec<String>,
    deletion_latency: Option<Duration>,
    idle_wait: Option<Duration>,
    shutdown_time: Option<Duration>,
}

/// Runs the scenario (`args`: `--check`).
pub(crate) async fn run(args: &[String]) -> anyhow::Result<ExitCode> {
    let mut check = false;
    for arg in args {
        match arg.as_str() {
            "--check" => check = true,
            other => bail!("unknown option `{other}`; usage: demo [--check] | demo operator ..."),
        }
    }
    let client = Client::try_default()
        .await
        .context("no cluster configuration: set KUBECONFIG (scripts/demo does)")?;
    let mut demo = Demo::setup(client).await?;
    // Ctrl-C ends the scenario early, but still cleans up (the namespace, the CRD).
    let played = tokio::select! {
        played = demo.play() => played,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    demo.teardown().await;
    if let Err(err) = &played {
        println!("\ndemo: the scenario stopped early: {err:#}");
    }
    demo.summary();
    let failed = demo.checks.iter().filter(|c| !c.ok).count();
    if played.is_err() || failed > 0 {
        if failed > 0 {
            println!("demo: {failed} expected event(s) did not happen");
        }
        return Ok(if check {
            ExitCode::FAILURE
        } else {
            ExitCode::from(2)
        });
    }
    Ok(ExitCode::SUCCESS)
}

fn say(journal: &Journal, text: &str) {
    println!("\n{} ==> {text}", journal.stamp());
}

impl Demo {
    /// Installs the CRDs (remembering which were new) and creates the namespace.
    async fn setup(client: Client) -> anyhow::Result<Self> {
        let journal = Journal::new(Instant::now());
        let version = client
            .apiserver_version()
            .await
            .context("the API server does not answer")?;
        say(
            &journal,
            &format!(
                "connected to Kubernetes {}.{}",
                version.major, version.minor
            ),
        );
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let mut created_crds = Vec::new();
        for crd in kopf_examples::crd::crds() {
            let name = crd.name_any();
            if crds.get_opt(&name).await?.is_none() {
                created_crds.push(name);
            }
        }
        kopf_examples::cli::install_crds_with(&client).await?;
        let suffix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
            ^ std::process::id();
        let ns = format!("kopf-demo-{:06x}", suffix & 0xff_ffff);
        let namespace: Namespace = serde_json::from_value(json!({
            "metadata": {"name": ns, "labels": {"app.kubernetes.io/part-of": "kopf-demo"}},
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("cannot create the namespace {ns}"))?;
        say(
            &journal,
            &format!("installed the KopfExample CRD; created the namespace {ns}"),
        );
        Ok(Self {
            api: Api::namespaced(client.clone(), &ns),
            client,
            ns,
            journal,
            child: None,
            checks: Vec::new(),
            created_crds,
            deletion_latency: None,
            idle_wait: None,
            shutdown_time: None,
        })
    }

    fn check(&mut self, ok: bool, what: &str) {
        println!(
            "  {} │ {} {what}",
            self.journal.stamp(),
            if ok { "✓" } else { "✗ MISSING:" }
        );
        self.checks.push(Check { ok });
    }

    /// The whole scenario; each step records its checks.
    async fn play(&mut self) -> anyhow::Result<()> {
        self.start_operator()?;
        let created = self.create_objects().await?;
        self.watch(created).await;
        self.change_spec().await?;
        self.delete_one().await?;
        self.stop_operator().await?;
        Ok(())
    }

    /// Starts `demo operator` as a child process, its JSON log read by the journal.
    fn start_operator(&mut self) -> anyhow::Result<()> {
        say(
            &self.journal,
            "starting the demo operator (heartbeat daemon, tick and quiet timers)",
        );
        let exe = std::env::current_exe().context("cannot find the demo binary")?;
        let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
        let mut child = tokio::process::Command::new(exe)
            .args(["operator", "--json", "--namespace", &self.ns])
            // The scenario reads the handlers' `info` lines: keep them whatever RUST_LOG says.
            .env("RUST_LOG", format!("{filter},demo=info"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start the demo operator")?;
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(self.journal.clone().follow(stderr));
        }
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(self.journal.clone().follow(stdout));
        }
        self.child = Some(child);
        Ok(())
    }

    /// Creates the objects; returns when the first creation was sent.
    async fn create_objects(&mut self) -> anyhow::Result<Instant> {
        say(&self.journal, &format!("creating {}", OBJECTS.join(", ")));
        let created = Instant::now();
        for name in OBJECTS {
            let spec = KopfExampleSpec {
                field: Some(format!("{name}-v1")),
                items: vec!["one".into(), "two".into()],
                ..KopfExampleSpec::default()
            };
            self.api
                .create(&PostParams::default(), &KopfExample::new(name, spec))
                .await?;
        }
        Ok(created)
    }

    /// Lets the daemons and timers run until each object's idle timer has fired once.
    async fn watch(&mut self, created: Instant) {
        say(&self.journal, "watching the daemons and timers");
        let started = self
            .journal
            .wait(PROMPTLY, |j| {
                OBJECTS
                    .iter()
                    .all(|o| j.count("daemon-started", Some(o)) == 1)
            })
            .await;
        self.check(started, "a heartbeat daemon started for each object");
        let idle = self
            .journal
            .wait(IDLE + PROMPTLY, |j| {
                OBJECTS.iter().all(|o| {
                    j.count("idle-fired", Some(o)) >= 1 && j.count("timer-fired", Some(o)) >= 2
                })
            })
            .await;
        self.check(
            idle,
            "the tick timer fired at least twice and the idle timer once per object",
        );
        let first_idle = self.journal.events("idle-fired", None);
        let not_early = !first_idle.is_empty() && first_idle.iter().all(|e| e.at >= created + IDLE);
        self.check(
            not_early,
            "no idle timer fired before 6 s of quiet after creation",
        );
    }

    /// Changes demo-b's spec: its idle timer waits for 6 s of quiet again.
    async fn change_spec(&mut self) -> anyhow::Result<()> {
        say(
            &self.journal,
            "changing demo-b's spec: its quiet timer waits 6 s again",
        );
        let before = self.journal.count("idle-fired", Some("demo-b"));
        let changed = Instant::now();
        let patch = json!({"spec": {"field": "demo-b-v2"}});
        self.api
            .patch("demo-b", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let fired = self
            .journal
            .wait(IDLE + PROMPTLY, |j| {
                j.count("idle-fired", Some("demo-b")) > before
            })
            .await;
        let at = self
            .journal
            .events("idle-fired", Some("demo-b"))
            .get(before)
            .map(|e| e.at);
        self.idle_wait = at.map(|at| at - changed);
        self.check(fired, "demo-b's idle timer fired again after the change");
        let waited = at.is_some_and(|at| at >= changed + IDLE);
        self.check(waited, "...and not before 6 s of quiet after the change");
        let unchanged = self.journal.count("idle-fired", Some("demo-a")) == 1;
        self.check(
            unchanged,
            "demo-a (unchanged) did not get another idle run meanwhile",
        );
        Ok(())
    }

    /// Deletes demo-c and measures how long it takes to disappear.
    async fn delete_one(&mut self) -> anyhow::Result<()> {
        say(
            &self.journal,
            "deleting demo-c: its daemon stops, then the finalizer is released",
        );
        let deleted = Instant::now();
        self.api.delete("demo-c", &DeleteParams::default()).await?;
        let deadline = deleted + PROMPTLY;
        let gone = loop {
            if self.api.get_opt("demo-c").await?.is_none() {
                break Some(Instant::now());
            }
            if Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        self.deletion_latency = gone.map(|at| at - deleted);
        self.check(gone.is_some(), "demo-c disappeared");
        let stopped = self
            .journal
            .wait(PROMPTLY, |j| j.count("daemon-stopped", Some("demo-c")) == 1)
            .await;
        let reason = self
            .journal
            .events("daemon-stopped", Some("demo-c"))
            .pop()
            .and_then(|e| e.reason);
        let graceful = stopped && reason.is_some_and(|r| r.contains("resource deleted"));
        self.check(
            graceful,
            "demo-c's daemon stopped gracefully (reason: resource deleted)",
        );
        let Some(gone) = gone else { return Ok(()) };
        let later = self.journal.count("timer-fired", Some("demo-a")) + 2;
        let control = self
            .journal
            .wait(PROMPTLY, |j| {
                j.count("timer-fired", Some("demo-a")) >= later
            })
            .await;
        let quiet = self
            .journal
            .events("timer-fired", Some("demo-c"))
            .iter()
            .all(|e| e.at < gone);
        self.check(
            control && quiet,
            "no timer fired for demo-c once it was gone (demo-a's did)",
        );
        Ok(())
    }

    /// Sends SIGTERM to the operator and waits for it to exit.
    async fn stop_operator(&mut self) -> anyhow::Result<()> {
        say(&self.journal, "stopping the operator with SIGTERM");
        let Some(mut child) = self.child.take() else {
            bail!("the operator is not running")
        };
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw)
            .context("the operator has already exited")?;
        let signalled = Instant::now();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)?;
        let status = tokio::time::timeout(PROMPTLY, child.wait()).await;
        self.shutdown_time = Some(signalled.elapsed());
        let clean = matches!(status, Ok(Ok(s)) if s.success());
        self.check(clean, "the operator exited with status 0");
        if !clean {
            self.child = Some(child); // killed in teardown
        }
        let stopped = self
            .journal
            .wait(Duration::from_secs(2), |j| {
                ["demo-a", "demo-b"].iter().all(|o| {
                    j.events("daemon-stopped", Some(o)).iter().any(|e| {
                        e.reason
                            .as_deref()
                            .is_some_and(|r| r.contains("operator exiting"))
                    })
                })
            })
            .await;
        self.check(
            stopped,
            "the daemons of demo-a and demo-b stopped (reason: operator exiting)",
        );
        Ok(())
    }

    /// Stops what is still running and removes what the demo created.
    async fn teardown(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
        // The operator leaves its finalizers on shutdown (daemons resume after a restart); the
        // demo will not restart it, so it removes them before deleting the namespace.
        let unfinalize = json!({"metadata": {"finalizers": null}});
        if let Ok(list) = self.api.list(&ListParams::default()).await {
            for obj in list {
                let name = obj.name_any();
                let patch = Patch::Merge(&unfinalize);
                let _ = self.api.patch(&name, &PatchParams::default(), &patch).await;
            }
        }
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let deleted = namespaces.delete(&self.ns, &DeleteParams::default()).await;
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for name in &self.created_crds {
            let _ = crds.delete(name, &DeleteParams::default()).await;
        }
        let what = match deleted {
            Ok(_) => format!("deleted the namespace {}", self.ns),
            Err(err) => format!("could not delete the namespace {}: {err}", self.ns),
        };
        say(&self.journal, &what);
    }

    /// Prints what happened.
    fn summary(&self) {
        let j = &self.journal;
        let secs = |d: Option<Duration>| {
            d.map_or_else(|| "-".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()))
        };
        let stops_deleted = j
            .events("daemon-stopped", None)
            .iter()
            .filter(|e| {
                e.reason
                    .as_deref()
                    .is_some_and(|r| r.contains("resource deleted"))
            })
            .count();
        let stops = j.count("daemon-stopped", None);
        println!("\n==> summary");
        println!(
            "  daemons:   {} started, {stops} stopped ({stops_deleted} by deletion, {} by the operator's exit); {} heartbeats",
            j.count("daemon-started", None),
            stops - stops_deleted,
            j.count("heartbeat", None)
        );
        println!(
            "  timers:    tick fired {} times, quiet (idle) fired {} times",
            j.count("timer-fired", None),
            j.count("idle-fired", None)
        );
        println!(
            "  idle:      after demo-b's spec change its quiet timer fired {} later (idle = 6 s)",
            secs(self.idle_wait)
        );
        println!(
            "  deletion:  demo-c was gone {} after the delete request",
            secs(self.deletion_latency)
        );
        println!(
            "  shutdown:  the operator exited {} after SIGTERM",
            secs(self.shutdown_time)
        );
        let passed = self.checks.iter().filter(|c| c.ok).count();
        println!(
            "  checks:    {passed}/{} expected events happened",
            self.checks.len()
        );
    }
}
