//! The checks of a wall-clock schedule (`cron`, `tz`, `missed`) behind
//! [`super::timer::schedule`]: the expression parsed as the runtime parses it, the time zone
//! looked up in the database the runtime bundles, and the options a cron timer excludes.

use croner::parser::{CronParser, Seconds};
use darling::util::SpannedValue;
use syn::spanned::Spanned;

use super::cron_fields;
use super::error::err;
use crate::args::{DelayArg, MissedArg, RawArgs};
use crate::model::{Cron, Missed};

/// The time zone of a `cron` without `tz`.
const DEFAULT_TZ: &str = "UTC";

const FIELDS_HINT: &str = "write 5 fields, `minute hour day-of-month month day-of-week` \
    (0-59, 0-23, 1-31, 1-12 or JAN-DEC, 0-7 or SUN-SAT), e.g. \"0 3 * * *\" for 03:00 every \
    day, or 6 fields with seconds first, e.g. \"30 0 3 * * *\"";

const MONOTONIC: &str = "a cron timer runs at the wall-clock occurrences of its expression, \
    while `interval`, `idle` and `sharp` are the monotonic schedule (time elapsed since a run or \
    a change); pick one";

/// The parser the runtime uses too: 5 fields, or 6 with seconds first (or 7 with a year last).
fn parser() -> CronParser {
    CronParser::builder().seconds(Seconds::Optional).build()
}

/// The cron schedule, if `cron` is given; `tz` and `missed` need it.
pub(crate) fn cron(args: &RawArgs) -> darling::Result<Option<Cron>> {
    let Some(expr) = &args.cron else {
        return without_cron(args).map(|()| None);
    };
    let mut errors = darling::Error::accumulator();
    errors.handle(expression(expr));
    if let Some(tz) = &args.tz {
        errors.handle(time_zone(tz));
    }
    errors.handle(conflicts(args));
    errors.finish()?;
    Ok(Some(Cron {
        expr: (**expr).clone(),
        tz: args
            .tz
            .as_ref()
            .map_or(DEFAULT_TZ, |tz| tz.as_str())
            .to_owned(),
        missed: match args.missed.as_ref().map_or(MissedArg::Skip, |m| **m) {
            MissedArg::Skip => Missed::Skip,
            MissedArg::RunOnce => Missed::RunOnce,
        },
    }))
}

fn without_cron(args: &RawArgs) -> darling::Result<()> {
    let mut errors = darling::Error::accumulator();
    if let Some(tz) = &args.tz {
        errors.push(err(
            "`tz` only applies to a `cron` schedule: it is the time zone the cron expression is \
             read in (`interval`, `idle` and `once` do not depend on the wall clock)",
            tz.span(),
        ));
    }
    if let Some(missed) = &args.missed {
        errors.push(err(
            "`missed` only applies to a `cron` schedule: it says what happens to the occurrences \
             missed while no operator ran the timer (`interval`, `idle` and `once` have no \
             occurrences to miss)",
            missed.span(),
        ));
    }
    errors.finish()
}

/// The expression parses, takes in each field only what that field takes, and matches at least
/// one date.
fn expression(expr: &SpannedValue<String>) -> darling::Result<()> {
    // The parser takes any name in any field (`0 0 * * JAN` runs on Mondays): the fields' own
    // check refuses what the parser accepts but the user cannot have meant.
    let parsed = parser().parse(expr);
    if let (Ok(_), Some(field)) = (&parsed, cron_fields::diagnose(expr)) {
        return Err(err(
            format!("invalid cron expression \"{}\": {field}", expr.as_str()),
            expr.span(),
        ));
    }
    let cron = parsed.map_err(|e| {
        // A field at fault is named; otherwise the parser's reason, with the fields' layout.
        let reason = match cron_fields::diagnose(expr) {
            Some(field) => field,
            None => format!("{}; {FIELDS_HINT}", e.to_string().trim_end_matches('.')),
        };
        err(
            format!("invalid cron expression \"{}\": {reason}", expr.as_str()),
            expr.span(),
        )
    })?;
    // From a fixed instant (2000-01-01), so that a build does not depend on when it runs.
    let start = jiff::Timestamp::constant(946_684_800, 0).to_zoned(jiff::tz::TimeZone::UTC);
    match cron.find_next_occurrence(&start, true) {
        Ok(_) => Ok(()),
        Err(_) => Err(err(
            format!(
                "the cron expression \"{}\" never matches any date (e.g. a day the month does \
                 not have, such as February 30th, or only years in the past)",
                expr.as_str()
            ),
            expr.span(),
        )),
    }
}

/// The time zone is in the bundled database; if not, the closest names.
fn time_zone(tz: &SpannedValue<String>) -> darling::Result<()> {
    let db = jiff::tz::db();
    if db.get(tz).is_ok() {
        return Ok(());
    }
    let suggestions = match fixed_offset(tz) {
        Some(etc) if db.get(&etc).is_ok() => vec![etc],
        _ => closest_zones(tz),
    };
    let mut msg = format!("unknown time zone \"{}\"", tz.as_str());
    if let Some(list) = or_list(&suggestions) {
        msg.push_str(&format!(": did you mean {list}?"));
    }
    msg.push_str(
        " (`tz` takes an IANA time zone name such as \"Europe/Berlin\" or \"America/New_York\"; \
         the default is \"UTC\")",
    );
    if fixed_offset(tz).is_some() {
        msg.push_str(
            "; a fixed offset is written `Etc/GMT-1` for UTC+01:00 (the sign is inverted)",
        );
    }
    Err(err(msg, tz.span()))
}

/// `UTC+1` / `GMT-05:00` as the `Etc/GMT∓N` zone (POSIX inverts the sign).
fn fixed_offset(name: &str) -> Option<String> {
    let upper = name.trim().to_ascii_uppercase();
    let rest = upper
        .strip_prefix("UTC")
        .or_else(|| upper.strip_prefix("GMT"))?;
    let (sign, hours) = match rest.split_at_checked(1)? {
        ("+", hours) => ('-', hours),
        ("-", hours) => ('+', hours),
        _ => return None,
    };
    let hours = hours.strip_suffix(":00").unwrap_or(hours);
    let hours: u8 = hours.parse().ok().filter(|h| *h <= 14)?;
    Some(if hours == 0 {
        "Etc/GMT".to_owned()
    } else {
        format!("Etc/GMT{sign}{hours}")
    })
}

/// Up to three zone names close to `name` (compared whole and by their last segment, so that
/// `Berlin` finds `Europe/Berlin`), best first.
fn closest_zones(name: &str) -> Vec<String> {
    const THRESHOLD: f64 = 0.85;
    const TIE: f64 = 0.015;
    let wanted = name.trim().to_ascii_lowercase();
    let mut scored: Vec<(f64, String)> = jiff::tz::db()
        .available()
        .map(|zone| {
            let zone = zone.as_str().to_owned();
            let lower = zone.to_ascii_lowercase();
            let last = lower.rsplit('/').next().unwrap_or(&lower);
            let score =
                strsim::jaro_winkler(&wanted, &lower).max(strsim::jaro_winkler(&wanted, last));
            (score, zone)
        })
        .filter(|(score, _)| *score >= THRESHOLD)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let best = scored.first().map_or(0.0, |(score, _)| *score);
    scored
        .into_iter()
        .take_while(|(score, _)| best - score <= TIE)
        .take(3)
        .map(|(_, zone)| zone)
        .collect()
}

/// "`a`", "`a` or `b`", "`a`, `b` or `c`".
fn or_list(items: &[String]) -> Option<String> {
    let (last, init) = items.split_last()?;
    let init: Vec<String> = init.iter().map(|i| format!("`{i}`")).collect();
    Some(if init.is_empty() {
        format!("`{last}`")
    } else {
        format!("{} or `{last}`", init.join(", "))
    })
}

/// The options a wall-clock schedule excludes; each is reported on its own token.
fn conflicts(args: &RawArgs) -> darling::Result<()> {
    let mut errors = darling::Error::accumulator();
    let monotonic = [
        ("interval", args.interval.map(|d| d.span)),
        ("idle", args.idle.map(|d| d.span)),
        (
            "sharp",
            args.sharp.as_ref().filter(|s| ***s).map(SpannedValue::span),
        ),
    ];
    for (name, span) in monotonic {
        if let Some(span) = span {
            errors.push(err(
                format!("`{name}` cannot be combined with `cron`: {MONOTONIC}"),
                span,
            ));
        }
    }
    if let Some(delay) = &args.initial_delay {
        let span = match delay {
            DelayArg::Fixed(d) => d.span,
            DelayArg::Computed(f) => f.0.span(),
        };
        errors.push(err(
            "`initial_delay` cannot be combined with `cron`: a cron timer's first run is the next \
             occurrence of its expression (use `jitter` to spread the runs of many objects)",
            span,
        ));
    }
    if let Some(once) = args.once.as_ref().filter(|o| ***o) {
        errors.push(err(
            "`once` cannot be combined with `cron`: a cron timer runs at every occurrence of its \
             expression; for a one-shot timer, use `once` without `cron`",
            once.span(),
        ));
    }
    errors.finish()
}

#[cfg(test)]
mod tests {
    use super::closest_zones as closest;

    #[test]
    fn time_zone_suggestions() {
        assert_eq!(closest("Europe/Berln"), ["Europe/Berlin"]);
        assert_eq!(closest("Berlin"), ["Europe/Berlin"]);
        assert_eq!(closest("America/NewYork"), ["America/New_York"]);
        assert!(closest("xyzzy").is_empty());
        assert!(closest("").is_empty());
    }
}
