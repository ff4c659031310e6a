//! `#[timer(cron = ...)]`: the wall-clock schedule, its mistakes, and its code.

use proc_macro2::TokenStream;
use quote::quote;

use super::{build, errors, pod_daemon};
use crate::expand::expand;
use crate::kind::Kind;
use crate::model::{Cron, Missed};

#[test]
fn cron_schedule() {
    let m = build(
        Kind::Timer,
        quote!(
            cron = "0 3 * * MON-FRI",
            tz = "Europe/Berlin",
            missed = "run_once",
            jitter = "5m"
        ),
        pod_daemon(),
    )
    .unwrap();
    assert_eq!(
        m.schedule.cron,
        Some(Cron {
            expr: "0 3 * * MON-FRI".to_owned(),
            tz: "Europe/Berlin".to_owned(),
            missed: Missed::RunOnce,
        })
    );
    assert_eq!(m.schedule.jitter, Some(std::time::Duration::from_secs(300)));
    assert!(m.schedule.interval.is_none() && m.schedule.idle.is_none());
    assert!(!m.schedule.sharp && !m.schedule.once);

    // Defaults: UTC, skip; seconds first and nicknames parse too.
    for expr in [
        "*/15 * * * *",
        "30 0 3 * * *",
        "@daily",
        "0 0 29 2 *",
        "0 0 * jan-mar mon-fri",
        "0 0 L * *",
        "0 0 * * 5#2",
        "0 0 * * FRIL",
        "0 0 15W * *",
    ] {
        let m = build(Kind::Timer, quote!(cron = #expr), pod_daemon()).unwrap();
        let cron = m.schedule.cron.expect("a cron schedule");
        assert_eq!((cron.expr.as_str(), cron.tz.as_str()), (expr, "UTC"));
        assert_eq!(cron.missed, Missed::Skip);
    }
    let plain = build(Kind::Timer, quote!(interval = "1m"), pod_daemon()).unwrap();
    assert_eq!(plain.schedule.cron, None);
}

#[test]
fn cron_mistakes() {
    let cases: [(TokenStream, &str); 18] = [
        (
            quote!(cron = "0 0 * * JAN"),
            "`JAN` is not a value of the day of week (5th field)",
        ),
        (
            quote!(cron = "0 0 * MON-FRI *"),
            "`MON` is not a value of the month (4th field)",
        ),
        (
            quote!(cron = "0 3 * *"),
            "invalid cron expression \"0 3 * *\"",
        ),
        (quote!(cron = "0 3 * *"), "6 fields with seconds first"),
        (
            quote!(cron = "0 25 * * *"),
            "25 is out of range for the hour (2nd field), which takes 0-23",
        ),
        (
            quote!(cron = "0 9 * * MONDAY"),
            "the names SUN, MON, TUE, WED, THU, FRI, SAT: did you mean `MON`?",
        ),
        (quote!(cron = ""), "invalid cron expression"),
        (quote!(cron = "0 0 31 2 *"), "never matches"),
        (
            quote!(cron = "@daily", tz = "Europe/Berln"),
            "did you mean `Europe/Berlin`?",
        ),
        (
            quote!(cron = "@daily", tz = "Mars/Olympus"),
            "unknown time zone \"Mars/Olympus\"",
        ),
        (
            quote!(interval = "1m", tz = "UTC"),
            "`tz` only applies to a `cron` schedule",
        ),
        (
            quote!(cron = "@daily", missed = "later"),
            "unknown `missed` value \"later\"",
        ),
        (
            quote!(once, missed = "skip"),
            "`missed` only applies to a `cron` schedule",
        ),
        (
            quote!(cron = "@daily", interval = "1m"),
            "`interval` cannot be combined with `cron`",
        ),
        (
            quote!(cron = "@daily", idle = "1m"),
            "`idle` cannot be combined with `cron`",
        ),
        (
            quote!(cron = "@daily", sharp),
            "`sharp` cannot be combined with `cron`",
        ),
        (
            quote!(cron = "@daily", initial_delay = f),
            "`initial_delay` cannot be combined",
        ),
        (
            quote!(cron = "@daily", once),
            "`once` cannot be combined with `cron`",
        ),
    ];
    for (args, expected) in cases {
        let e = errors(Kind::Timer, args.clone(), pod_daemon());
        assert!(e.iter().any(|e| e.contains(expected)), "{args}: {e:?}");
    }
}

#[test]
fn cron_conflicts_are_reported_once_each() {
    // `sharp` without `interval` and `once` with `interval` are the cron check's to report.
    let e = errors(
        Kind::Timer,
        quote!(cron = "@daily", sharp, once, interval = "1m"),
        pod_daemon(),
    );
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(
        e.iter()
            .all(|e| e.contains("cannot be combined with `cron`")),
        "{e:?}"
    );
    // A broken expression is still a schedule: no "needs a schedule" on top.
    let e = errors(Kind::Timer, quote!(cron = "nonsense"), pod_daemon());
    assert_eq!(e.len(), 1, "{e:?}");
}

#[test]
fn cron_options_on_a_daemon_are_named() {
    let e = errors(
        Kind::Daemon,
        quote!(cron = "@daily", tz = "UTC", missed = "skip"),
        pod_daemon(),
    );
    assert_eq!(e.len(), 3, "{e:?}");
    for name in ["cron", "tz", "missed"] {
        let expected = format!("`{name}` is a `#[timer]` option");
        assert!(e.iter().any(|e| e.contains(&expected)), "{e:?}");
    }
}

#[test]
fn a_fixed_offset_is_suggested_as_etc() {
    let e = errors(
        Kind::Timer,
        quote!(cron = "@daily", tz = "UTC+1"),
        pod_daemon(),
    );
    assert!(e[0].contains("did you mean `Etc/GMT-1`?"), "{e:?}");
}

#[test]
fn cron_codegen() {
    let out = expand(
        Kind::Timer,
        quote!(cron = "0 3 * * *", missed = "run_once"),
        pod_daemon(),
    )
    .to_string();
    assert!(
        out.contains(
            "cron : :: core :: option :: Option :: Some (:: kopf_runtime :: engine :: \
             CronSchedule { expr : \"0 3 * * *\" , tz : \"UTC\" , missed : :: kopf_runtime :: \
             engine :: Missed :: RunOnce , })"
        ),
        "{out}"
    );
    let out = expand(Kind::Timer, quote!(idle = "1m"), pod_daemon()).to_string();
    assert!(
        out.contains("cron : :: core :: option :: Option :: None"),
        "{out}"
    );
}
