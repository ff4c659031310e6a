//! `kubectl`, as a user would run it against the test cluster: for tests of what it shows.

use std::process::Stdio;

use tokio::io::AsyncWriteExt as _;

/// Runs the `kubectl` that `tools/kube-testenv/build.sh` puts beside the API server it builds
/// (`$KUBE_BIN`, else `target/kube-bin`) with `$KUBECONFIG`, `args`, and `stdin` as its input;
/// whether it succeeded, and its output and errors together.
///
/// # Errors
///
/// If `KUBECONFIG` is not set or `kubectl` cannot be run.
///
/// # Cancellation safety
///
/// Cancel-safe: a dropped call kills nothing, and `kubectl` ends on its own.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// let (ok, out) = kopf_tests::kubectl(&["get", "namespaces"], "").await?;
/// assert!(ok, "{out}");
/// # Ok(()) }
/// ```
pub async fn kubectl(args: &[&str], stdin: &str) -> anyhow::Result<(bool, String)> {
    let default = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/kube-bin");
    let bin = std::env::var("KUBE_BIN").unwrap_or_else(|_| default.to_owned());
    let kubeconfig = std::env::var("KUBECONFIG")?;
    let mut child = tokio::process::Command::new(format!("{bin}/kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes()).await?;
    }
    let out = child.wait_with_output().await?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Ok((out.status.success(), text))
}
