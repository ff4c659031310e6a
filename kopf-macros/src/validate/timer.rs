//! The checks of `#[timer]`: its schedule, free of contradictions (the wall-clock options in
//! [`super::cron`]).

use proc_macro2::Span;

use super::cron;
use super::error::err;
use crate::args::RawArgs;
use crate::kind::Kind;
use crate::model::Schedule;

/// `slack`: whole milliseconds (tokio's timer resolution); on a timer, shorter than its
/// `interval`, which it loosens (a timer without one has no wait to loosen).
pub(crate) fn slack(kind: Kind, args: &RawArgs) -> darling::Result<()> {
    let Some(slack) = args.slack else {
        return Ok(());
    };
    if slack.value.subsec_nanos() % 1_000_000 != 0 {
        return Err(err(
            "`slack` is counted in whole milliseconds, tokio's timer resolution: write e.g. \
             slack = \"50ms\"",
            slack.span,
        ));
    }
    if kind != Kind::Timer {
        return Ok(());
    }
    match args.interval {
        _ if args.cron.is_some() => Err(err(
            "`slack` loosens the wait for a timer's next `interval`; cron occurrences are \
             waited for on time (spread the runs of many objects with `jitter`)",
            slack.span,
        )),
        None => Err(err(
            "`slack` loosens the wait for a timer's next `interval`: this timer has none",
            slack.span,
        )),
        Some(interval) if slack.value >= interval.value => Err(err(
            format!(
                "`slack` ({:?}) must be shorter than the `interval` ({:?}) it loosens",
                slack.value, interval.value
            ),
            slack.span,
        )),
        Some(_) => Ok(()),
    }
}

/// A timer's schedule, checked for contradictions (the cron options in [`super::cron`]).
pub(crate) fn schedule(kind: Kind, args: &RawArgs, attr: Span) -> darling::Result<Schedule> {
    if kind != Kind::Timer {
        return Ok(Schedule::default()); // timer options were already reported by name
    }
    let mut errors = darling::Error::accumulator();
    let cron = errors.handle(cron::cron(args)).flatten();
    let schedule = Schedule {
        interval: args.interval.map(|d| d.value),
        sharp: args.sharp.as_ref().is_some_and(|s| **s),
        idle: args.idle.map(|d| d.value),
        jitter: args.jitter.map(|d| d.value),
        once: args.once.as_ref().is_some_and(|o| **o),
        cron,
    };
    // With `cron`, its own checks report `interval`, `idle`, `sharp` and `once`.
    let has_cron = args.cron.is_some();
    if let (Some(once), true) = (&args.once, schedule.once)
        && (schedule.interval.is_some() || schedule.idle.is_some())
        && !has_cron
    {
        errors.push(err(
            "`once` contradicts `interval`/`idle`: a one-shot timer runs exactly once per \
             object; remove `once` for a repeating timer",
            once.span(),
        ));
    }
    if let (Some(sharp), true) = (&args.sharp, schedule.sharp)
        && schedule.interval.is_none()
        && !has_cron
    {
        errors.push(err("`sharp` needs an `interval` to keep to", sharp.span()));
    }
    if schedule.interval.is_none() && schedule.idle.is_none() && !schedule.once && !has_cron {
        errors.push(err(
            "a #[timer] needs a schedule: `interval = \"30s\"` (run every 30 s), `idle = \"5m\"` \
             (run once the object has been unchanged for 5 min), both, `cron = \"0 3 * * *\"` \
             (run at 03:00 every day, UTC unless `tz` is given), or `once` (a one-shot timer that \
             runs exactly once per object)",
            attr,
        ));
    }
    errors.finish_with(schedule)
}
