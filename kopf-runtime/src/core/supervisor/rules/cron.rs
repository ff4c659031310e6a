//! The occurrences of a cron timer's schedule: its expression read in its time zone by
//! `croner`, on `jiff` times. Daylight-saving changes follow croner's rules:
//!
//! ```text
//!  fixed time (e.g. 30 2 * * *)    spring forward: runs at the first valid time after the gap
//!                                  fall back:      runs once, in the first pass of the hour
//!  wildcards/steps (e.g. */15 * …) spring forward: the times inside the gap are skipped
//!                                  fall back:      runs for every matching time of both passes
//! ```

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::core::spec::CronSchedule;

/// Why a schedule cannot be used (the macros check both at compile time; a hand-built
/// [`CronSchedule`] may still carry either).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanError {
    #[error("invalid cron expression {expr:?}: {reason}")]
    Expression { expr: &'static str, reason: String },
    #[error("unknown time zone {0:?}")]
    Zone(&'static str),
}

/// A parsed schedule.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    cron: Cron,
    tz: TimeZone,
}

impl Plan {
    /// Parses the expression (seconds optional, as the macros do) and finds the zone.
    pub(crate) fn compile(schedule: &CronSchedule) -> Result<Self, PlanError> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(schedule.expr)
            .map_err(|err| PlanError::Expression {
                expr: schedule.expr,
                reason: err.to_string(),
            })?;
        let tz = jiff::tz::db()
            .get(schedule.tz)
            .map_err(|_| PlanError::Zone(schedule.tz))?;
        Ok(Self { cron, tz })
    }

    /// The first occurrence strictly after `after` (`None`: there is none, e.g. a past year).
    pub(crate) fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let zoned = after.to_zoned(self.tz.clone());
        let next = self.cron.find_next_occurrence(&zoned, false).ok()?;
        Some(next.timestamp())
    }

    /// The latest occurrence at or before `at`.
    pub(crate) fn latest_until(&self, at: Timestamp) -> Option<Timestamp> {
        let zoned = at.to_zoned(self.tz.clone());
        let previous = self.cron.find_previous_occurrence(&zoned, true).ok()?;
        Some(previous.timestamp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::spec::Missed;

    fn plan(expr: &'static str, tz: &'static str) -> Plan {
        let schedule = CronSchedule {
            expr,
            tz,
            missed: Missed::Skip,
        };
        Plan::compile(&schedule).unwrap_or_else(|err| panic!("{err}"))
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap_or_else(|err| panic!("{text}: {err}"))
    }

    /// The occurrences after `from`, as UTC timestamps.
    fn after(plan: &Plan, from: &str, n: usize) -> Vec<String> {
        let mut t = at(from);
        (0..n)
            .map_while(|_| {
                t = plan.next_after(t)?;
                Some(t.to_string())
            })
            .collect()
    }

    #[test]
    fn utc_by_default_and_seconds_optional() {
        assert_eq!(
            after(&plan("0 3 * * *", "UTC"), "2026-12-01T12:00:00Z", 2),
            ["2026-12-02T03:00:00Z", "2026-12-03T03:00:00Z"]
        );
        assert_eq!(
            after(&plan("*/20 * * * * *", "UTC"), "2026-12-01T12:00:05Z", 3),
            [
                "2026-12-01T12:00:20Z",
                "2026-12-01T12:00:40Z",
                "2026-12-01T12:01:00Z"
            ]
        );
    }

    #[test]
    fn berlin_spring_forward_runs_a_fixed_time_after_the_gap() {
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day.
        assert_eq!(
            after(
                &plan("30 2 * * *", "Europe/Berlin"),
                "2026-03-28T12:00:00Z",
                3
            ),
            [
                "2026-03-29T01:00:00Z", // 03:00 CEST, the first valid time after the gap
                "2026-03-30T00:30:00Z", // 02:30 CEST
                "2026-03-31T00:30:00Z",
            ]
        );
    }

    #[test]
    fn berlin_fall_back_runs_a_fixed_time_once() {
        // 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
        assert_eq!(
            after(
                &plan("30 2 * * *", "Europe/Berlin"),
                "2026-10-24T12:00:00Z",
                2
            ),
            ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
        );
    }

    #[test]
    fn new_york_wildcards_skip_the_gap_and_repeat_the_hour() {
        // 2026-03-08: 02:00 EST jumps to 03:00 EDT: 02:00 and 02:30 do not exist.
        assert_eq!(
            after(
                &plan("*/30 * * * *", "America/New_York"),
                "2026-03-08T06:15:00Z",
                3
            ),
            [
                "2026-03-08T06:30:00Z", // 01:30 EST
                "2026-03-08T07:00:00Z", // 03:00 EDT
                "2026-03-08T07:30:00Z", // 03:30 EDT
            ]
        );
        // 2026-11-01: 02:00 EDT falls back to 01:00 EST: 01:00 and 01:30 happen twice.
        assert_eq!(
            after(
                &plan("*/30 1 * * *", "America/New_York"),
                "2026-11-01T04:45:00Z",
                4
            ),
            [
                "2026-11-01T05:00:00Z", // 01:00 EDT
                "2026-11-01T05:30:00Z", // 01:30 EDT
                "2026-11-01T06:00:00Z", // 01:00 EST
                "2026-11-01T06:30:00Z", // 01:30 EST
            ]
        );
    }

    #[test]
    fn the_latest_occurrence_includes_now() {
        let plan = plan("0 * * * *", "UTC");
        assert_eq!(
            plan.latest_until(at("2026-12-01T12:00:00Z")),
            Some(at("2026-12-01T12:00:00Z"))
        );
        assert_eq!(
            plan.latest_until(at("2026-12-01T12:59:59Z")),
            Some(at("2026-12-01T12:00:00Z"))
        );
    }

    #[test]
    fn bad_schedules_are_named() {
        let bad = CronSchedule {
            expr: "61 * * * *",
            tz: "UTC",
            missed: Missed::Skip,
        };
        let err = Plan::compile(&bad).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("\"61 * * * *\"")));
        let zone = CronSchedule {
            tz: "Europe/Berln",
            ..bad
        };
        let zone = CronSchedule {
            expr: "0 3 * * *",
            ..zone
        };
        let err = Plan::compile(&zone).err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("unknown time zone \"Europe/Berln\""));
    }
}
