//! The floor arm: a bare tokio program with one task per object, no Kubernetes at all.
//!
//! `bench-tokio timers N` runs N loops of "record a fire, sleep 1 s" (kopf's soft interval:
//! the next run starts one interval after the end of the previous one); `bench-tokio daemons N`
//! runs N loops of "record a tick, wait up to 1 s for the stop signal". SIGTERM stops it (daemons
//! record their stop). Fires go to the fire log at `$BENCH_FIRES`, as in every other arm.
//!
//! The tasks start all at once, so their fires fall in the same few milliseconds each second and
//! one wake-up serves many. `BENCH_FLOOR_PHASES=spread` spreads their first runs evenly over one
//! interval instead, so that each fire is a wake-up of its own: what a wake-up costs, set against
//! the task's run (on this machine, at N = 1 000: ~28 µs a fire spread, ~2 µs together). At
//! N = 1 000 the floor's fires fall in 8 distinct milliseconds of the second (over 5 s);
//! kopf-rs's timers, which start when their objects are listed, in 52; its daemons, which start
//! once their finalizers land, in 442. `bench/README.md` says what that does to scenario 2.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use kopf_bench::names::object_name;
use kopf_bench::{FireLog, Tag};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Waits up to `d`; true if stopped.
async fn sleep(stop: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        () = stop.cancelled() => true,
        () = tokio::time::sleep(d) => stop.is_cancelled(),
    }
}

/// When task `i` of `n` first runs: `i / n` of the way into the first interval when `spread`,
/// else at once.
fn start_offset(i: usize, n: usize, interval: Duration, spread: bool) -> Duration {
    if !spread || n == 0 {
        return Duration::ZERO;
    }
    let (i, n) = (
        u128::try_from(i).unwrap_or(0),
        u128::try_from(n).unwrap_or(1),
    );
    Duration::from_nanos(u64::try_from(interval.as_nanos() * i / n).unwrap_or(0))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, n] = args.as_slice() else {
        bail!("usage: bench-tokio timers|daemons N");
    };
    let n: usize = n.parse().context("N must be a number")?;
    let log = Arc::new(FireLog::from_env()?);
    let stop_all = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    let interval = Duration::from_secs(1);
    let spread = match std::env::var("BENCH_FLOOR_PHASES").as_deref() {
        Ok("spread") => true,
        Ok("together" | "") | Err(_) => false,
        Ok(other) => bail!("BENCH_FLOOR_PHASES={other:?}: expected `together` or `spread`"),
    };
    for i in 0..n {
        let name = object_name(i);
        let log = Arc::clone(&log);
        let stop = stop_all.clone();
        let offset = start_offset(i, n, interval, spread);
        match mode.as_str() {
            "timers" => tasks.spawn(async move {
                if sleep(&stop, offset).await {
                    return;
                }
                loop {
                    log.record(Tag::Fire, &name);
                    if sleep(&stop, interval).await {
                        break;
                    }
                }
            }),
            "daemons" => tasks.spawn(async move {
                if !sleep(&stop, offset).await {
                    loop {
                        log.record(Tag::Tick, &name);
                        if sleep(&stop, interval).await {
                            break;
                        }
                    }
                }
                log.record(Tag::Stop, &name);
            }),
            other => bail!("unknown mode {other:?}"),
        };
    }
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    stop_all.cancel();
    while tasks.join_next().await.is_some() {}
    log.flush();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_first_runs_cover_one_interval_evenly() {
        let second = Duration::from_secs(1);
        let offsets: Vec<_> = (0..4).map(|i| start_offset(i, 4, second, true)).collect();
        let ms = [0, 250, 500, 750].map(Duration::from_millis);
        assert_eq!(offsets, ms);
        assert_eq!(start_offset(3, 4, second, false), Duration::ZERO);
        assert_eq!(start_offset(0, 0, second, true), Duration::ZERO);
    }
}
