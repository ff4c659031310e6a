//! Scenario 7 in one process, no API server: N timers or daemons at 1 Hz, run either by the
//! kopf-rs supervisor (`timers`, `daemons`) or as bare tokio tasks (`tokio-timers`,
//! `tokio-daemons`, the floor). The harness (`kopf-bench`) reads CPU and RSS from outside at the
//! phases announced on stdout (see `kopf-bench`'s `inproc` module).
//!
//! `objects` observes the same objects with a handler that matches none: what the supervisor
//! keeps per object alone, subtracted by the harness to give the cost per instance excluding
//! the object cache.
//!
//! Usage: `bench-inproc MODE N WINDOW_SECONDS`

mod supervised;
mod track;

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use crate::track::Tracker;

const INTERVAL: Duration = Duration::from_secs(1);

/// Prints a phase line and gives the harness a moment to read `/proc`.
async fn phase(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
    sleep(Duration::from_millis(500)).await;
}

/// What a population must do: start everything, and stop everything.
pub(crate) trait Population {
    /// Starts all instances.
    fn spawn_all(&mut self) -> impl Future<Output = anyhow::Result<()>>;
    /// Stops all instances and waits for them.
    fn stop_all(self) -> impl Future<Output = anyhow::Result<()>>;
}

/// Bare tokio tasks: the floor.
struct Bare {
    n: usize,
    tracker: Arc<Tracker>,
    stop: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
}

impl Population for Bare {
    async fn spawn_all(&mut self) -> anyhow::Result<()> {
        for i in 0..self.n {
            let (tracker, stop) = (Arc::clone(&self.tracker), self.stop.clone());
            self.tasks.spawn(async move {
                loop {
                    tracker.fire(i);
                    let stopped = tokio::select! {
                        () = stop.cancelled() => true,
                        () = sleep(INTERVAL) => stop.is_cancelled(),
                    };
                    if stopped {
                        break;
                    }
                }
            });
        }
        Ok(())
    }

    async fn stop_all(mut self) -> anyhow::Result<()> {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
        Ok(())
    }
}

async fn measure(
    mut population: impl Population,
    tracker: &Tracker,
    n: usize,
    window: Duration,
) -> anyhow::Result<()> {
    phase("baseline").await;
    let t = Instant::now();
    population.spawn_all().await?;
    phase(&format!("spawned {}", t.elapsed().as_secs_f64())).await;
    // Let every instance fire at least twice, and the allocator settle.
    #[allow(clippy::cast_precision_loss)]
    let warmup = Duration::from_secs_f64(3.0 + n as f64 / 200_000.0);
    sleep(warmup).await;
    tracker.start_window();
    let started = Instant::now();
    phase("window-start").await;
    let end = Instant::now() + window;
    while Instant::now() + Duration::from_secs(2) < end {
        sleep(Duration::from_secs(2)).await;
        phase("sample").await;
    }
    sleep(end.saturating_duration_since(Instant::now())).await;
    println!("window-end");
    let summary = tracker.finish(&[0.5, 0.99, 0.999]);
    let elapsed = started.elapsed().as_secs_f64();
    let lat = &summary.quantiles;
    #[allow(clippy::cast_precision_loss)]
    let result = serde_json::json!({
        "fires": summary.fires,
        "early_fires": summary.early,
        "objects_firing": summary.objects,
        "mean_gap_s": summary.mean_gap_s,
        // Objects firing / their mean gap, as in scenarios 1-6 (see `Tracker::finish`).
        "fires_per_s": summary.objects as f64 / summary.mean_gap_s,
        // The raw count over the window, quantised when the instances fire in phase.
        "window_fires_per_s": summary.fires as f64 / elapsed,
        "lat_p50_ms": lat[0],
        "lat_p99_ms": lat[1],
        "lat_p999_ms": lat[2],
    });
    phase(&format!("result {result}")).await;
    let t = Instant::now();
    population.stop_all().await?;
    phase(&format!("stopped {}", t.elapsed().as_secs_f64())).await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, n, window] = args.as_slice() else {
        bail!(
            "usage: bench-inproc timers|daemons|objects|tokio-timers|tokio-daemons N WINDOW_SECONDS"
        );
    };
    let n: usize = n.parse().context("N must be a number")?;
    let window = Duration::from_secs_f64(window.parse().context("WINDOW must be seconds")?);
    let tracker = Arc::new(Tracker::new(n, INTERVAL));
    match mode.as_str() {
        "tokio-timers" | "tokio-daemons" => {
            let bare = Bare {
                n,
                tracker: Arc::clone(&tracker),
                stop: CancellationToken::new(),
                tasks: tokio::task::JoinSet::new(),
            };
            measure(bare, &tracker, n, window).await
        }
        "timers" | "daemons" | "objects" => {
            // `objects`: the same objects observed by the same supervisor, with a handler that
            // matches none of them: the per-object cost alone (the object cache).
            let population = supervised::Supervised::prepare(
                n,
                mode == "daemons",
                mode != "objects",
                Arc::clone(&tracker),
            )?;
            measure(population, &tracker, n, window).await
        }
        other => bail!("unknown mode {other:?}"),
    }
}
