//! Timer slack: a wake-up may come up to `slack` late, so that the wake-ups of many instances
//! fall on the same instants and the runtime wakes once for all of them, as Linux's timer
//! slack lets the kernel merge timers.
//!
//! ```text
//!  grid:     |---------|---------|---------|      one line every `slack`, the same for the
//!  wanted:      a  b       c d        e            whole process
//!  woken:              ab        cd        e      each at the next line: ≤ slack late
//! ```
//!
//! The grid is one for the process (its lines are `slack` apart from one instant), so
//! instances of every kind and object with the same slack share their lines; a slack that
//! divides another (10 ms and 50 ms) shares every line of the coarser one.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

/// The instant the process's grid is drawn from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    Instant::from_std(*EPOCH.get_or_init(std::time::Instant::now))
}

/// When to wake for something wanted at `at` with this slack: the first line of the process's
/// grid not before `at` (`at` itself with no slack).
pub(crate) fn wake_at(at: Instant, slack: Duration) -> Instant {
    if slack.is_zero() {
        return at;
    }
    coarsen(epoch(), at, slack)
}

/// The first instant `epoch ± k × slack` not before `at`.
fn coarsen(epoch: Instant, at: Instant, slack: Duration) -> Instant {
    let step = slack.as_nanos();
    if step == 0 {
        return at;
    }
    let late = if at >= epoch {
        let past = at.duration_since(epoch).as_nanos() % step;
        if past == 0 { 0 } else { step - past }
    } else {
        // Lines before the epoch: epoch - k × slack.
        epoch.duration_since(at).as_nanos() % step
    };
    at + Duration::from_nanos(u64::try_from(late).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_wake_up_moves_to_the_next_line_of_the_grid() {
        let t0 = Instant::now();
        // (wanted, slack) → woken, all from the epoch t0 + 1 s.
        let epoch = t0 + MS(1000);
        let table = [
            (MS(1000), MS(50), MS(1000)), // on a line: not moved
            (MS(1001), MS(50), MS(1050)),
            (MS(1049), MS(50), MS(1050)),
            (MS(1050), MS(50), MS(1050)),
            (MS(1234), MS(0), MS(1234)), // no slack: exact
            (MS(990), MS(50), MS(1000)), // before the epoch: its lines go back too
            (MS(940), MS(50), MS(950)),
            (MS(950), MS(50), MS(950)),
        ];
        for (wanted, slack, woken) in table {
            assert_eq!(
                coarsen(epoch, t0 + wanted, slack),
                t0 + woken,
                "{wanted:?} with {slack:?}"
            );
        }
    }

    #[test]
    fn wake_ups_within_one_slack_share_a_line_and_are_never_early_or_later_than_the_slack() {
        let t0 = Instant::now();
        let slack = MS(20);
        let lines: std::collections::BTreeSet<_> = (0..1000)
            .map(|ms| {
                let at = t0 + MS(ms);
                let woken = wake_at(at, slack);
                assert!(woken >= at && woken - at < slack, "{ms} ms");
                woken
            })
            .collect();
        // 1 000 instants a millisecond apart wake on 50 (or 51) lines.
        assert!((50..=51).contains(&lines.len()), "{}", lines.len());
    }
}
