//! What the tests that run the operator as child processes of their own binary share: the
//! runner that stands in for libtest, the shared append-only log, and starting and signalling a
//! child.
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::ffi::OsString;
use std::future::Future;
use std::io::Write as _;
use std::path::Path;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

/// One test of a binary without the libtest harness.
pub type Test = fn() -> Pin<Box<dyn Future<Output = anyhow::Result<()>>>>;

/// Runs the `tests` whose names contain one of the command line's non-flag arguments (all
/// without any), each on a fresh runtime's `block_on`, and reports like libtest.
pub fn run_tests(tests: &[(&str, Test)]) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(test())));
        match outcome {
            Ok(Ok(())) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Ok(Err(err)) => {
                println!("test {name} ... FAILED: {err:#}");
                failed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED (panicked)");
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs a child's `main` on a fresh runtime: exit 0 when it returns `Ok`, 2 (with the error on
/// stderr) when it fails, 3 when no runtime can be built.
pub fn run_child(main: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("child: no runtime: {err}");
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(main) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("child: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Appends one line to the log at `path`: one write in append mode, so that lines of
/// concurrent handlers and processes never interleave.
pub fn append_line(path: &Path, line: &str) {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path);
    if let Err(err) = file.and_then(|mut f| f.write_all(format!("{line}\n").as_bytes())) {
        eprintln!("cannot append to {}: {err}", path.display());
    }
}

/// One line of a shared log: `<kind> <name> <uid> <pid> [<detail>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub pid: u32,
    /// The rest of the line (a stop reason, a time).
    pub detail: String,
}

impl Entry {
    /// The detail as a time in nanoseconds (0 if it is none).
    pub fn at(&self) -> u128 {
        self.detail.parse().unwrap_or_default()
    }
}

/// The entries of the log at `path` (none if it does not exist yet).
pub fn read_log(path: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(5, ' ');
            Some(Entry {
                kind: parts.next()?.to_owned(),
                name: parts.next()?.to_owned(),
                uid: parts.next()?.to_owned(),
                pid: parts.next()?.parse().ok()?,
                detail: parts.next().unwrap_or_default().trim().to_owned(),
            })
        })
        .collect()
}

/// A child process of this test binary.
pub struct Child {
    pub process: tokio::process::Child,
    pub pid: u32,
}

impl Child {
    /// Starts this binary again with `env`, its stdout and stderr appended to `output`.
    pub fn spawn(env: &[(&str, OsString)], output: &Path) -> anyhow::Result<Self> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(output)?;
        let mut command = tokio::process::Command::new(std::env::current_exe()?);
        for (key, value) in env {
            command.env(key, value);
        }
        let process = command
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()?;
        let pid = process
            .id()
            .ok_or_else(|| anyhow::anyhow!("the child has no pid"))?;
        Ok(Self { process, pid })
    }

    /// Sends `signal` (e.g. `-TERM`, `-KILL`, `-STOP`, `-CONT`).
    pub async fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let status = tokio::process::Command::new("kill")
            .args([signal, &self.pid.to_string()])
            .status()
            .await?;
        anyhow::ensure!(status.success(), "kill {signal} {} failed", self.pid);
        Ok(())
    }

    /// Waits for the exit, at most `timeout`: the exit code, `None` if ended by a signal.
    pub async fn exit_code(&mut self, timeout: Duration) -> anyhow::Result<Option<i32>> {
        use std::os::unix::process::ExitStatusExt as _;
        let status = tokio::time::timeout(timeout, self.process.wait()).await??;
        if let Some(signal) = status.signal() {
            println!("child {} ended by signal {signal}", self.pid);
        }
        Ok(status.code())
    }
}
