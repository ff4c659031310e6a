//! Scenario 7 in one process, no API server: N timers or daemons at a fixed interval (1 s unless
//! `BENCH_INTERVAL_S` says otherwise, in seconds, fractions allowed), run either by the
//! kopf-rs supervisor (`timers`, `daemons`) or as bare tokio tasks (`tokio-timers`,
//! `tokio-daemons`, the floor). The harness (`kopf-bench`) reads CPU and RSS from outside at the
//! phases announced on stdout (see `kopf-bench`'s `inproc` module).
//!
//! `objects` observes the same objects with a handler that matches none: what the supervisor
//! keeps per object alone, subtracted by the harness to give the cost per instance excluding
//! the object cache.
//!
//! Usage: `[BENCH_INTERVAL_S=SECONDS] bench-inproc MODE N WINDOW_SECONDS`

mod supervised;
mod track;

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use crate::track::Tracker;

/// The env var that sets the interval of every timer and daemon, in seconds.
const INTERVAL_ENV: &str = "BENCH_INTERVAL_S";

/// The interval from `BENCH_INTERVAL_S` (`value`; 1 s when unset): finite, positive seconds.
fn parse_interval(value: Option<&str>) -> anyhow::Result<Duration> {
    let Some(value) = value else {
        return Ok(Duration::from_secs(1));
    };
    let secs: f64 = value
        .trim()
        .parse()
        .with_context(|| format!("{INTERVAL_ENV}={value:?} is not a number of seconds"))?;
    anyhow::ensure!(
        secs.is_finite() && secs > 0.0,
        "{INTERVAL_ENV}={value:?}: the interval must be a positive number of seconds"
    );
    Duration::try_from_secs_f64(secs)
        .with_context(|| format!("{INTERVAL_ENV}={value:?} is out of range"))
}

/// How long to let the instances run before the window: every instance fires at least twice
/// (2.5 intervals), the allocator settles (3 s), and a large population gets time to start
/// (1 s per 200 000).
fn warmup(n: usize, interval: Duration) -> Duration {
    #[allow(clippy::cast_precision_loss)]
    let start = n as f64 / 200_000.0;
    Duration::from_secs_f64(2.5 * interval.as_secs_f64() + 3.0 + start)
}

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
    interval: Duration,
    tracker: Arc<Tracker>,
    stop: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
}

impl Population for Bare {
    async fn spawn_all(&mut self) -> anyhow::Result<()> {
        let interval = self.interval;
        for i in 0..self.n {
            let (tracker, stop) = (Arc::clone(&self.tracker), self.stop.clone());
            self.tasks.spawn(async move {
                loop {
                    tracker.fire(i);
                    let stopped = tokio::select! {
                        () = stop.cancelled() => true,
                        () = sleep(interval) => stop.is_cancelled(),
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

/// Starts the population, waits for it to settle, measures the window and stops it, printing
/// the phases for the harness.
async fn measure(
    mut population: impl Population,
    tracker: &Tracker,
    n: usize,
    (interval, window): (Duration, Duration),
) -> anyhow::Result<()> {
    phase("baseline").await;
    let t = Instant::now();
    population.spawn_all().await?;
    phase(&format!("spawned {}", t.elapsed().as_secs_f64())).await;
    sleep(warmup(n, interval)).await;
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
    let window = window.parse().context("WINDOW must be seconds")?;
    let window = Duration::try_from_secs_f64(window).context("WINDOW must be seconds")?;
    let interval = parse_interval(std::env::var(INTERVAL_ENV).ok().as_deref())?;
    // Every instance must fire in the window, or fires/s (objects firing / their mean gap)
    // undercounts.
    anyhow::ensure!(
        window >= interval,
        "the window ({} s) is shorter than the interval ({} s)",
        window.as_secs_f64(),
        interval.as_secs_f64()
    );
    let tracker = Arc::new(Tracker::new(n, interval));
    match mode.as_str() {
        "tokio-timers" | "tokio-daemons" => {
            let bare = Bare {
                n,
                interval,
                tracker: Arc::clone(&tracker),
                stop: CancellationToken::new(),
                tasks: tokio::task::JoinSet::new(),
            };
            measure(bare, &tracker, n, (interval, window)).await
        }
        "timers" | "daemons" | "objects" => {
            // `objects`: the same objects observed by the same supervisor, with a handler that
            // matches none of them: the per-object cost alone (the object cache).
            let population = supervised::Supervised::prepare(
                n,
                mode == "daemons",
                mode != "objects",
                interval,
                Arc::clone(&tracker),
            )?;
            measure(population, &tracker, n, (interval, window)).await
        }
        other => bail!("unknown mode {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_defaults_to_one_second_and_takes_fractions() {
        assert_eq!(parse_interval(None).ok(), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_interval(Some("10")).ok(),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_interval(Some(" 0.25 ")).ok(),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn a_zero_negative_or_non_numeric_interval_is_rejected() {
        for bad in ["0", "-1", "", "ten", "inf", "NaN", "1e300"] {
            let err = parse_interval(Some(bad)).err();
            assert!(
                err.is_some_and(|e| e.to_string().contains(INTERVAL_ENV)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_warmup_scales_with_the_interval_and_n() {
        assert_eq!(
            warmup(0, Duration::from_secs(1)),
            Duration::from_millis(5_500)
        );
        let long = warmup(1_000_000, Duration::from_secs(10));
        assert_eq!(long, Duration::from_secs(33));
    }
}
