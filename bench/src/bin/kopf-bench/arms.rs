//! The arms: which program runs for which scenario, and running one as a child process.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use kopf_bench::names::NAMESPACE;
use tokio::time::Instant;

/// The start of the line `bench-kube-store` prints on stdout once its store holds every object:
/// `synced <count>`.
pub(crate) const SYNCED: &str = "synced ";

/// One arm of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Arm {
    /// kopf-rs (`bench-kopf-rs`).
    KopfRs,
    /// Python kopf 1.45.2 (`bench/python/operator.py` under `kopf run`).
    KopfPy,
    /// The bare tokio floor (`bench-tokio`).
    Tokio,
    /// The raw kube-rs loop (`bench-kube-loop`).
    KubeLoop,
    /// The raw kube-rs watch + store, doing nothing else (`bench-kube-store`): the memory
    /// reference of scenarios 1 and 2.
    KubeStore,
    /// A kube-rs `Controller` with `.owns(..)` (`bench-kube-controller`): the reference of
    /// scenario 10.
    KubeController,
}

impl Arm {
    pub(crate) const ALL: [Self; 6] = [
        Self::KopfRs,
        Self::KopfPy,
        Self::Tokio,
        Self::KubeLoop,
        Self::KubeStore,
        Self::KubeController,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::KopfRs => "kopf-rs",
            Self::KopfPy => "kopf-py",
            Self::Tokio => "tokio",
            Self::KubeLoop => "kube-loop",
            Self::KubeStore => "kube-store",
            Self::KubeController => "kube-controller",
        }
    }

    /// Whether the arm records fires. `kube-store` prints [`SYNCED`] on stdout once it holds
    /// every object instead; `kube-controller` (scenario 10) is observed through its children.
    pub(crate) fn records_fires(self) -> bool {
        !matches!(self, Self::KubeStore | Self::KubeController)
    }

    pub(crate) fn parse(s: &str) -> anyhow::Result<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .with_context(|| format!("unknown arm {s:?}"))
    }
}

/// What the operator arms run: their handler mode (`BENCH_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Timers,
    Daemons,
    TimersWrite,
    /// Daemons, as one of several elected replicas (kopf-rs only).
    DaemonsHa,
    /// Daemons, as one member of a sharded group (kopf-rs only; identity in `BENCH_IDENTITY`).
    DaemonsShard,
    /// A reconcile handler owning three children per parent (scenario 10).
    Children,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Self::Timers => "timers",
            Self::Daemons => "daemons",
            Self::TimersWrite => "timers-write",
            Self::DaemonsHa => "daemons-ha",
            Self::DaemonsShard => "daemons-shard",
            Self::Children => "children",
        }
    }
}

/// Where the arm programs are.
#[derive(Debug, Clone)]
pub(crate) struct Programs {
    /// The directory of the harness binary (the Rust arms are built next to it).
    pub(crate) bin_dir: PathBuf,
    /// `bench/` in the source tree.
    pub(crate) bench_dir: PathBuf,
}

impl Programs {
    pub(crate) fn locate() -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let bin_dir = exe
            .parent()
            .context("the harness binary has no directory")?
            .to_owned();
        let bench_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        Ok(Self { bin_dir, bench_dir })
    }

    fn rust(&self, name: &str) -> anyhow::Result<Command> {
        let path = self.bin_dir.join(name);
        if !path.exists() {
            bail!(
                "{} is missing; build it with `cargo build -p kopf-bench --bins`",
                path.display()
            );
        }
        Ok(Command::new(path))
    }

    fn command(&self, arm: Arm, mode: Mode, n: usize) -> anyhow::Result<Command> {
        Ok(match arm {
            Arm::KopfRs => {
                let mut c = self.rust("bench-kopf-rs")?;
                c.arg(mode.as_str());
                c
            }
            Arm::KopfPy => {
                let kopf = self.bench_dir.join(".venv/bin/kopf");
                if !kopf.exists() {
                    bail!(
                        "{} is missing; create the venv (bench/README.md)",
                        kopf.display()
                    );
                }
                let mut c = Command::new(kopf);
                c.args(["run", "--standalone", "--namespace", NAMESPACE]);
                c.arg(self.bench_dir.join("python/operator.py"));
                c
            }
            Arm::Tokio => {
                let mut c = self.rust("bench-tokio")?;
                c.arg(if mode == Mode::Daemons {
                    "daemons"
                } else {
                    "timers"
                })
                .arg(n.to_string());
                c
            }
            Arm::KubeLoop => {
                let mut c = self.rust("bench-kube-loop")?;
                match mode {
                    Mode::TimersWrite => c.arg("status").arg(n.to_string()),
                    _ => c.arg("finalize"),
                };
                c
            }
            Arm::KubeStore => {
                let mut c = self.rust("bench-kube-store")?;
                c.arg(n.to_string());
                c
            }
            Arm::KubeController => self.rust("bench-kube-controller")?,
        })
    }

    /// Starts an arm with its fire log and output files in `dir`.
    pub(crate) fn spawn(
        &self,
        arm: Arm,
        mode: Mode,
        n: usize,
        dir: &Path,
    ) -> anyhow::Result<Running> {
        self.spawn_env(arm, mode, n, dir, &[])
    }

    /// [`spawn`](Self::spawn) with extra environment variables.
    pub(crate) fn spawn_env(
        &self,
        arm: Arm,
        mode: Mode,
        n: usize,
        dir: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Running> {
        let mut cmd = self.command(arm, mode, n)?;
        cmd.envs(env.iter().copied());
        let fires = dir.join("fires.txt");
        // A trial directory is reused by later runs: never append to an earlier fire log.
        match std::fs::remove_file(&fires) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        let stdout = dir.join("stdout.log");
        cmd.env("BENCH_FIRES", &fires)
            .env("BENCH_MODE", mode.as_str())
            .env("BENCH_N", n.to_string())
            .stdin(Stdio::null())
            .stdout(File::create(&stdout)?)
            .stderr(File::create(dir.join("stderr.log"))?);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting the {} arm", arm.as_str()))?;
        Ok(Running {
            child,
            fires,
            stdout,
        })
    }
}

/// A running arm.
pub(crate) struct Running {
    child: Child,
    /// Its fire log.
    pub(crate) fires: PathBuf,
    /// Its stdout.
    stdout: PathBuf,
}

impl Running {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The count of the last [`SYNCED`] line the arm printed on stdout, if any (`None` also
    /// while its stdout cannot be read).
    pub(crate) fn synced(&self) -> Option<usize> {
        let out = std::fs::read_to_string(&self.stdout).ok()?;
        out.lines()
            .rev()
            .find_map(|l| l.strip_prefix(SYNCED)?.trim().parse().ok())
    }

    /// Fails if the arm has already exited.
    pub(crate) fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the arm exited early with {status} (see stderr.log in its trial directory)");
        }
        Ok(())
    }

    /// Sends SIGTERM.
    pub(crate) fn terminate(&self) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status()?;
        if !status.success() {
            bail!("kill -TERM {} failed", self.pid());
        }
        Ok(())
    }

    /// Waits up to `limit` for the exit; returns the exit code (`None`: killed by a signal).
    /// Kills the process if it is still running at the limit and reports that as an error.
    pub(crate) async fn wait(&mut self, limit: Duration) -> anyhow::Result<Option<i32>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status.code());
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("the arm did not exit within {limit:?} after SIGTERM; killed it");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// SIGTERM, then wait; kills it after `limit`.
    /// SIGKILL, and waits for the process to end.
    pub(crate) fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    pub(crate) async fn stop(&mut self, limit: Duration) -> anyhow::Result<Option<i32>> {
        if self.child.try_wait()?.is_none() {
            self.terminate()?;
        }
        self.wait(limit).await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
