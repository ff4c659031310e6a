//! A second API server without the `ShardedListAndWatch` feature gate, for the fallback test:
//! `tools/kube-testenv/start.sh` in a state directory under `target/tmp`, without
//! `KUBE_TESTENV_FEATURE_GATES` and without kube-controller-manager, on free ports (or
//! `KOPF_SHARD_NOGATE_KUBE_PORT`, `KOPF_SHARD_NOGATE_ETCD_PORT`; the etcd peer port follows the
//! client port). Its watchdog stops it (and deletes the directory) when this process dies;
//! otherwise [`NoGateEnv::stop`] or the drop does.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kopf_tests::scripts_dir;

/// A running server without the gate.
#[derive(Debug)]
pub struct NoGateEnv {
    dir: PathBuf,
    stopped: bool,
}

/// The ports (API server, etcd client, etcd peer): from the environment, else free ones.
fn ports() -> anyhow::Result<[u16; 3]> {
    let listeners = [
        TcpListener::bind("127.0.0.1:0")?,
        TcpListener::bind("127.0.0.1:0")?,
        TcpListener::bind("127.0.0.1:0")?,
    ];
    let mut free = [0; 3];
    for (port, listener) in free.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    let env = |var: &str| std::env::var(var).ok().and_then(|p| p.parse::<u16>().ok());
    let kube = env("KOPF_SHARD_NOGATE_KUBE_PORT").unwrap_or(free[0]);
    let (etcd, peer) =
        env("KOPF_SHARD_NOGATE_ETCD_PORT").map_or((free[1], free[2]), |p| (p, p + 1));
    Ok([kube, etcd, peer])
}

async fn run(mut command: Command) -> anyhow::Result<Output> {
    Ok(tokio::task::spawn_blocking(move || command.output()).await??)
}

impl NoGateEnv {
    pub async fn start() -> anyhow::Result<Self> {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("kube-shard-nogate-{}", std::process::id()));
        let [kube, etcd, peer] = ports()?;
        let mut command = Command::new(scripts_dir().join("start.sh"));
        command
            .arg(&dir)
            .env_remove("KUBE_TESTENV_FEATURE_GATES")
            .env("KUBE_PORT", kube.to_string())
            .env("ETCD_PORT", etcd.to_string())
            .env("ETCD_PEER_PORT", peer.to_string())
            .env("KUBE_TESTENV_CONTROLLERS", "none")
            .env("KUBE_TESTENV_OWNER_PID", std::process::id().to_string())
            .env("KUBE_TESTENV_WIPE_ON_OWNER_EXIT", "1");
        let output = run(command).await?;
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        anyhow::ensure!(
            output.status.success(),
            "start.sh {} failed: {stderr}",
            dir.display()
        );
        let args = std::fs::read_to_string(dir.join("apiserver.args"))?;
        anyhow::ensure!(
            !args.contains("ShardedListAndWatch"),
            "the gate is on: {args}"
        );
        Ok(Self {
            dir,
            stopped: false,
        })
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.stopped = true;
        let mut command = Command::new(scripts_dir().join("stop.sh"));
        command.arg(&self.dir);
        let output = run(command).await?;
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        anyhow::ensure!(output.status.success(), "stop.sh failed: {stderr}");
        std::fs::remove_dir_all(&self.dir)?;
        Ok(())
    }
}

impl Drop for NoGateEnv {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let stopped = Command::new(scripts_dir().join("stop.sh"))
            .arg(&self.dir)
            .output();
        if !stopped.is_ok_and(|o| o.status.success()) {
            eprintln!("cannot stop the testenv in {}", self.dir.display());
        }
    }
}
