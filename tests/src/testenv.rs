//! An independent test environment (etcd + kube-apiserver) in a temporary directory, on free
//! ports, for tests that stop or restart the API server and must not disturb the shared one.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context as _, bail};
use kube::{Client, Config};

use crate::client::{config_from_file, connect};

/// The directory of the testenv scripts (`start.sh`, `stop.sh`, `apiserver.sh`).
///
/// # Examples
///
/// ```
/// assert!(kopf_tests::scripts_dir().join("start.sh").exists());
/// ```
#[must_use]
pub fn scripts_dir() -> PathBuf {
    let tests_crate = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests_crate
        .parent()
        .unwrap_or(tests_crate)
        .join("tools/kube-testenv")
}

/// Options for [`TestEnv::start_with`].
///
/// # Examples
///
/// ```
/// let options = kopf_tests::TestEnvOptions { controllers: true };
/// assert_ne!(options, kopf_tests::TestEnvOptions::default());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestEnvOptions {
    /// Also run kube-controller-manager (garbage collector and namespace controllers).
    pub controllers: bool,
}

/// A running independent test environment; stopped (by recorded PIDs) when dropped.
///
/// The scripts get `KUBE_TESTENV_OWNER_PID` = this process, so even a killed test binary
/// leaves no servers (and no directory) behind. The directory is removed after a clean stop,
/// and kept (with the servers' logs) when the test panicked.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// let env = kopf_tests::TestEnv::start().await?;
/// let client = env.client().await?;
/// env.restart_apiserver().await?;
/// client.apiserver_version().await?; // the same client works again
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TestEnv {
    dir: PathBuf,
    kubeconfig: PathBuf,
    kube_port: u16,
    stopped: bool,
}

impl TestEnv {
    /// Starts etcd + kube-apiserver (no controllers) in a new temporary directory on free ports.
    ///
    /// # Errors
    ///
    /// If `start.sh` fails (e.g. binaries not built); the error carries its output.
    ///
    /// # Cancellation safety
    ///
    /// Not cancel-safe: the start runs to completion on a blocking thread, and a server started
    /// after the future was dropped is only stopped by the watchdog when this process exits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// let env = kopf_tests::TestEnv::start().await?;
    /// println!("KUBECONFIG={}", env.kubeconfig().display());
    /// # Ok(()) }
    /// ```
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(TestEnvOptions::default()).await
    }

    /// Starts an independent test environment with `options`.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    ///
    /// # Cancellation safety
    ///
    /// As [`start`](Self::start).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// use kopf_tests::{TestEnv, TestEnvOptions};
    /// let env = TestEnv::start_with(TestEnvOptions { controllers: true }).await?;
    /// env.stop().await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_with(options: TestEnvOptions) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(unique_dir_name());
        let [kube_port, etcd_port, peer_port] = free_ports()?;
        let mut command = Command::new(scripts_dir().join("start.sh"));
        command
            .arg(&dir)
            .env("KUBE_PORT", kube_port.to_string())
            .env("ETCD_PORT", etcd_port.to_string())
            .env("ETCD_PEER_PORT", peer_port.to_string())
            .env("KUBE_TESTENV_OWNER_PID", std::process::id().to_string())
            .env("KUBE_TESTENV_WIPE_ON_OWNER_EXIT", "1")
            .env(
                "KUBE_TESTENV_CONTROLLERS",
                if options.controllers { "gc-ns" } else { "none" },
            );
        let output = run_blocking(command).await?;
        if !output.status.success() {
            // start.sh stopped what it had started; the directory is kept for its logs.
            bail!(
                "start.sh {} failed ({}):\n{}",
                dir.display(),
                output.status,
                describe(&output)
            );
        }
        Ok(Self {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            kube_port,
            stopped: false,
        })
    }

    /// The path of this environment's kubeconfig.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let env = &kopf_tests::TestEnv::start().await?;
    /// std::fs::read_to_string(env.kubeconfig()).unwrap();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The state directory (certificates, etcd data, logs).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let env = &kopf_tests::TestEnv::start().await?;
    /// let log = env.dir().join("kube-apiserver.log");
    /// println!("{}", std::fs::read_to_string(log)?);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The kube-apiserver's HTTPS port on 127.0.0.1.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let env = &kopf_tests::TestEnv::start().await?;
    /// assert_ne!(env.port(), 16443);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn port(&self) -> u16 {
        self.kube_port
    }

    /// The client configuration of this environment.
    ///
    /// # Errors
    ///
    /// If the kubeconfig cannot be read.
    ///
    /// # Cancellation safety
    ///
    /// Cancel-safe: it only reads a file.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let env = &kopf_tests::TestEnv::start().await?;
    /// let config = env.config().await?;
    /// println!("{}", config.cluster_url);
    /// # Ok(()) }
    /// ```
    pub async fn config(&self) -> anyhow::Result<Config> {
        config_from_file(&self.kubeconfig).await
    }

    /// A client for this environment, checked to answer.
    ///
    /// # Errors
    ///
    /// If the kubeconfig cannot be read or the server does not answer.
    ///
    /// # Cancellation safety
    ///
    /// Cancel-safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let env = &kopf_tests::TestEnv::start().await?;
    /// let client = env.client().await?;
    /// client.apiserver_version().await?;
    /// # Ok(()) }
    /// ```
    pub async fn client(&self) -> anyhow::Result<Client> {
        connect(self.config().await?).await
    }

    /// Stops only the kube-apiserver (etcd keeps the data); requests fail until it starts again.
    ///
    /// # Errors
    ///
    /// If `apiserver.sh stop` fails; the error carries its output.
    ///
    /// # Cancellation safety
    ///
    /// Not cancel-safe: the script runs to completion on a blocking thread.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let env = &kopf_tests::TestEnv::start().await?;
    /// env.stop_apiserver().await?;
    /// env.start_apiserver().await?;
    /// # Ok(()) }
    /// ```
    pub async fn stop_apiserver(&self) -> anyhow::Result<()> {
        self.apiserver("stop").await
    }

    /// Starts the kube-apiserver again (same certificates, port and tokens) and waits until it
    /// answers.
    ///
    /// # Errors
    ///
    /// If `apiserver.sh start` fails (e.g. not ready in time); the error carries the log tail.
    ///
    /// # Cancellation safety
    ///
    /// Not cancel-safe: the script runs to completion on a blocking thread.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let env = &kopf_tests::TestEnv::start().await?;
    /// env.start_apiserver().await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_apiserver(&self) -> anyhow::Result<()> {
        self.apiserver("start").await
    }

    /// Stops and starts the kube-apiserver, waiting until it answers again.
    ///
    /// # Errors
    ///
    /// As [`stop_apiserver`](Self::stop_apiserver) and [`start_apiserver`](Self::start_apiserver).
    ///
    /// # Cancellation safety
    ///
    /// Not cancel-safe: the script runs to completion on a blocking thread.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let env = &kopf_tests::TestEnv::start().await?;
    /// env.restart_apiserver().await?;
    /// # Ok(()) }
    /// ```
    pub async fn restart_apiserver(&self) -> anyhow::Result<()> {
        self.apiserver("restart").await
    }

    /// Stops all processes of this environment and removes its directory.
    ///
    /// # Errors
    ///
    /// If `stop.sh` fails; the directory is then kept.
    ///
    /// # Cancellation safety
    ///
    /// Not cancel-safe: the script runs to completion on a blocking thread; `Drop` then does
    /// nothing more.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// let env = kopf_tests::TestEnv::start().await?;
    /// env.stop().await?;
    /// # Ok(()) }
    /// ```
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.stopped = true;
        let mut command = Command::new(scripts_dir().join("stop.sh"));
        command.arg(&self.dir);
        let output = run_blocking(command).await?;
        if !output.status.success() {
            bail!(
                "stop.sh {} failed ({}):\n{}",
                self.dir.display(),
                output.status,
                describe(&output)
            );
        }
        std::fs::remove_dir_all(&self.dir)
            .with_context(|| format!("cannot remove {}", self.dir.display()))
    }

    async fn apiserver(&self, action: &str) -> anyhow::Result<()> {
        let mut command = Command::new(scripts_dir().join("apiserver.sh"));
        command.arg(action).arg(&self.dir);
        let output = run_blocking(command).await?;
        if !output.status.success() {
            bail!(
                "apiserver.sh {action} {} failed ({}):\n{}",
                self.dir.display(),
                output.status,
                describe(&output)
            );
        }
        Ok(())
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        match Command::new(scripts_dir().join("stop.sh"))
            .arg(&self.dir)
            .output()
        {
            Ok(output) if output.status.success() => {
                if std::thread::panicking() {
                    eprintln!(
                        "test failed: keeping the testenv directory {} (logs)",
                        self.dir.display()
                    );
                } else if let Err(err) = std::fs::remove_dir_all(&self.dir) {
                    eprintln!("cannot remove {}: {err}", self.dir.display());
                }
            }
            Ok(output) => eprintln!(
                "stop.sh {} failed: {}",
                self.dir.display(),
                describe(&output)
            ),
            Err(err) => eprintln!("cannot run stop.sh {}: {err}", self.dir.display()),
        }
    }
}

async fn run_blocking(mut command: Command) -> anyhow::Result<Output> {
    let program = command.get_program().to_string_lossy().into_owned();
    tokio::task::spawn_blocking(move || command.output())
        .await
        .context("the blocking task running a testenv script failed")?
        .with_context(|| format!("cannot run {program}"))
}

fn describe(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Three distinct free loopback ports, held open together while picking them so they differ.
fn free_ports() -> anyhow::Result<[u16; 3]> {
    let listeners = [
        TcpListener::bind("127.0.0.1:0")?,
        TcpListener::bind("127.0.0.1:0")?,
        TcpListener::bind("127.0.0.1:0")?,
    ];
    let mut ports = [0; 3];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

fn unique_dir_name() -> String {
    use std::hash::{BuildHasher, RandomState};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos();
    let suffix = RandomState::new().hash_one(nanos) & 0xffff_ffff;
    format!("kopf-testenv-{}-{suffix:08x}", std::process::id())
}
