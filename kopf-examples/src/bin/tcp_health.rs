//! # A daemon that mirrors an external process
//!
//! For every `KopfExample` whose `spec.field` is set, the `tcp_health` daemon connects to the
//! TCP endpoint named there (e.g. `127.0.0.1:7000`), reads the lines the process at that
//! endpoint sends (one status word per line, e.g. `ok` or `degraded`), and mirrors what it sees
//! into `status.health`:
//!
//! ```json
//! {"connected": true, "state": "ok", "lines": 42, "disconnects": 0, "error": null}
//! ```
//!
//! It shows:
//! - a long-running async daemon that owns an external connection, reconnecting with a pause;
//! - **periodic patch flushes**: the status is written at most every 2 s, and only when
//!   something changed (`Patch::flush`), while the daemon keeps running — in kopf a daemon's
//!   patch is only applied when it exits;
//! - a graceful stop: the stop flag is awaited next to the socket, and nothing is awaited after
//!   it (the last status is sent after the return), so deletion is immediate.
//!
//! ## Run it
//!
//! ```text
//! eval "$(tools/kube-testenv/start.sh)"   # or point KUBECONFIG at your cluster
//! cargo run -p kopf-examples --bin tcp_health -- --namespace default --install-crd
//! # in another terminal, an "external process" that reports its state every second:
//! while true; do echo ok; sleep 1; done | nc -l 127.0.0.1 7000
//! ```
//!
//! then create a `KopfExample` with `spec.field: "127.0.0.1:7000"` and read its `status.health`;
//! stop `nc` and see `connected` turn `false` within two seconds.
//!
//! ## An example, not a pattern for untrusted specs
//!
//! The daemon connects **wherever the object's spec says**, from inside the operator's pod.
//! Whoever may create a `KopfExample` can make the operator open connections to any host and
//! port its network reaches (services inside the cluster, the cloud's metadata endpoint), and
//! learn from `status.health` whether they answer and what their first line says. This is fine
//! on a development cluster where you create the objects yourself; an operator for objects
//! written by others must check the endpoint against an allow-list (or derive it from the
//! object itself rather than take it verbatim) and restrict the pod's egress with a
//! NetworkPolicy. For the same reason `tcp_health` is not in the image that
//! `kopf-examples/deploy/Dockerfile` builds.
//!
//! What the endpoint sends is bounded: a line longer than [`MAX_LINE`] bytes ends the connection
//! with an error (and is not stored), so a peer cannot make the operator buffer without limit or
//! write a huge `status`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{HandlerResult, Patch, Stopper, daemon};
use serde_json::json;
use tokio::io::AsyncRead;
use tokio::net::TcpStream;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tracing::{info, warn};

/// How often the mirrored health is written (when it changed).
const FLUSH_EVERY: Duration = Duration::from_secs(2);
/// How long to wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between connection attempts.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);
/// The longest line accepted from the endpoint, in bytes (without the newline).
const MAX_LINE: usize = 256;

/// What the daemon has seen of the endpoint.
#[derive(Debug, Default)]
struct Health {
    connected: bool,
    state: Option<String>,
    lines: u64,
    disconnects: u64,
    error: Option<String>,
    /// Changed since the last flush.
    dirty: bool,
}

impl Health {
    fn connected(&mut self) {
        self.connected = true;
        self.error = None;
        self.dirty = true;
    }

    fn line(&mut self, line: &str) {
        self.state = Some(line.trim().to_owned());
        self.lines += 1;
        self.dirty = true;
    }

    fn lost(&mut self, error: String) {
        if self.connected {
            self.disconnects += 1;
        }
        self.connected = false;
        self.error = Some(error);
        self.dirty = true;
    }

    /// Puts the health into the patch as `status.health` (without sending it).
    fn stage(&self, patch: &Patch) {
        patch.status(
            "health",
            json!({
                "connected": self.connected, "state": self.state, "lines": self.lines,
                "disconnects": self.disconnects, "error": self.error,
            }),
        );
    }

    /// Writes the health into `status.health` now, if it changed.
    async fn flush(&mut self, patch: &Patch) {
        if !self.dirty {
            return;
        }
        self.stage(patch);
        match patch.flush().await {
            Ok(()) => self.dirty = false,
            // Stays pending in the patch; the next flush (or the daemon's exit) retries it.
            Err(err) => warn!(%err, "cannot write status.health yet"),
        }
    }
}

/// Mirrors the endpoint in `spec.field` into `status.health` until stopped.
#[daemon(
    field = "spec.field",
    cancellation_backoff = "3s",
    cancellation_timeout = "10s"
)]
async fn tcp_health(obj: Arc<KopfExample>, stopper: Stopper, patch: Patch) -> HandlerResult {
    let addr = obj.spec.field.clone().unwrap_or_default();
    info!(%addr, "mirroring the endpoint");
    let mut health = Health::default();
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    while !stopper.is_stopped() {
        let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr));
        let stream = tokio::select! {
            () = stopper.stopped() => break,
            result = connect => result,
        };
        match stream {
            Ok(Ok(stream)) => {
                health.connected();
                health.flush(&patch).await;
                follow(stream, &mut health, &stopper, &patch, &mut flush).await;
            }
            Ok(Err(err)) => health.lost(format!("cannot connect to {addr}: {err}")),
            Err(_) => health.lost(format!(
                "no connection to {addr} within {CONNECT_TIMEOUT:?}"
            )),
        }
        if stopper.is_stopped() {
            break;
        }
        health.flush(&patch).await;
        if stopper.sleep(RECONNECT_AFTER).await {
            break;
        }
    }
    // No `.await` after the stop flag: the daemon returns in the poll that saw the flag, and the
    // staged status is sent after the return (unless the object is already gone).
    health.stage(&patch);
    info!(reason = %stopper.reason(), lines = health.lines, "stopped mirroring");
    Ok(())
}

/// Reads the endpoint's lines until it disconnects or the daemon is asked to stop, flushing
/// the health every [`FLUSH_EVERY`].
async fn follow(
    stream: TcpStream,
    health: &mut Health,
    stopper: &Stopper,
    patch: &Patch,
    flush: &mut tokio::time::Interval,
) {
    let mut lines = bounded_lines(stream);
    loop {
        tokio::select! {
            () = stopper.stopped() => return,
            _ = flush.tick() => health.flush(patch).await,
            line = lines.next() => match line {
                Some(Ok(line)) => health.line(&line),
                None => return health.lost("the endpoint closed the connection".to_owned()),
                Some(Err(err)) => return health.lost(read_error(&err)),
            },
        }
    }
}

/// The lines of `reader`, each at most [`MAX_LINE`] bytes long.
fn bounded_lines<R: AsyncRead>(reader: R) -> FramedRead<R, LinesCodec> {
    FramedRead::new(reader, LinesCodec::new_with_max_length(MAX_LINE))
}

/// What `status.health.error` says about a failed read.
fn read_error(err: &LinesCodecError) -> String {
    match err {
        LinesCodecError::MaxLineLengthExceeded => {
            format!("the endpoint sent a line longer than {MAX_LINE} bytes")
        }
        LinesCodecError::Io(err) => format!("read error: {err}"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kopf_examples::cli::run().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines read from `input`, or the error that ended the reading.
    async fn read_all(input: &[u8]) -> Result<Vec<String>, String> {
        let mut lines = bounded_lines(input);
        let mut out = Vec::new();
        while let Some(line) = lines.next().await {
            out.push(line.map_err(|err| read_error(&err))?);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn status_words_are_read_line_by_line() {
        assert_eq!(
            read_all(b"ok\ndegraded\r\nok").await,
            Ok(vec!["ok".into(), "degraded".into(), "ok".into()])
        );
    }

    #[tokio::test]
    async fn a_line_past_the_limit_ends_the_connection() {
        let mut input = b"ok\n".to_vec();
        input.resize(input.len() + 10 * MAX_LINE, b'x'); // never a newline
        let err = read_all(&input)
            .await
            .expect_err("an over-long line is refused");
        assert_eq!(
            err,
            format!("the endpoint sent a line longer than {MAX_LINE} bytes")
        );
        let at_limit = format!("{}\n", "y".repeat(MAX_LINE));
        assert_eq!(
            read_all(at_limit.as_bytes()).await.map(|l| l[0].len()),
            Ok(MAX_LINE)
        );
    }
}
