//! The Markdown report: method, machine, targets met or missed (see `targets`), and one table
//! per scenario.

use std::fmt::Write as _;

use kopf_bench::stats::{Summary, summarize};

use crate::inproc::parse_label;
use crate::results::Results;
use crate::targets;

/// The rows of scenario 9 (a single arm: one row per member count and step).
const SHARDS: &[(&str, &str)] = &[
    (
        "startup_cold_1_s",
        "1 member: all first fires, finalizers to place (s)",
    ),
    ("startup_1_s", "1 member: all first fires (s)"),
    ("cores_1", "1 member: CPU (cores)"),
    ("rss_1_mb", "1 member: steady RSS (MB)"),
    ("peak_rss_1_mb", "1 member: peak RSS (MB)"),
    ("ticks_1_per_s", "1 member: ticks/s"),
    ("first_fires_3_s", "3 members: all first fires (s)"),
    (
        "startup_3_s",
        "3 members: every daemon once, on its holder (s)",
    ),
    (
        "handed_over_3",
        "3 members: daemons handed over during the start-up",
    ),
    ("objects_3_a", "3 members: objects of a"),
    ("objects_3_b", "3 members: objects of b"),
    ("objects_3_c", "3 members: objects of c"),
    ("cores_3_a", "3 members: CPU of a (cores)"),
    ("cores_3_b", "3 members: CPU of b (cores)"),
    ("cores_3_c", "3 members: CPU of c (cores)"),
    ("cores_3_mean", "3 members: CPU, mean (cores)"),
    ("cores_3_ratio", "3 members: CPU, mean / 1 member"),
    ("rss_3_a_mb", "3 members: steady RSS of a (MB)"),
    ("rss_3_b_mb", "3 members: steady RSS of b (MB)"),
    ("rss_3_c_mb", "3 members: steady RSS of c (MB)"),
    ("rss_3_mean_mb", "3 members: steady RSS, mean (MB)"),
    ("rss_3_ratio", "3 members: steady RSS, mean / 1 member"),
    ("ticks_3_per_s", "3 members: ticks/s, all"),
    ("rebalance_s", "4th joins: rebalancing (s)"),
    ("objects_4_d", "4th joins: objects of d"),
    ("moved", "4th joins: daemons moved"),
    ("gap_p50_s", "4th joins: stop-to-restart gap p50 (s)"),
    ("gap_p99_s", "4th joins: stop-to-restart gap p99 (s)"),
    ("gap_max_s", "4th joins: stop-to-restart gap max (s)"),
    (
        "moved_unmatched",
        "4th joins: moved, stop or restart not seen",
    ),
    ("stopped_in_place", "4th joins: stopped, not moved"),
    ("overlaps", "daemons that ran twice at once (3-4 members)"),
    ("server_side", "shardSelector watches (1 = every member)"),
];

/// The rows of scenario 10.
const CHILDREN: &[(&str, &str)] = &[
    ("create_s", "the harness creating the parents (s)"),
    (
        "converge_s",
        "converge after the parents' creation began (s)",
    ),
    (
        "converge_after_create_s",
        "… of which after the last parent was created (s)",
    ),
    ("parents_per_s", "parents/s"),
    ("requests_converge", "API requests per converge"),
    (
        "requests_converge_per_parent",
        "API requests per converge, per parent",
    ),
    ("requests_converge_patch", "… of which patches"),
    ("cores", "CPU at rest (cores)"),
    ("rss_mb", "RSS at rest (MB)"),
    ("peak_rss_mb", "peak RSS (MB)"),
    ("requests_at_rest", "API requests at rest"),
    ("writes_at_rest", "API writes at rest"),
    ("restore_p50_ms", "child edit → restored, p50 (ms)"),
    ("restore_p99_ms", "child edit → restored, p99 (ms)"),
    ("restore_max_ms", "child edit → restored, max (ms)"),
    ("edits_restored", "edits restored"),
    ("edits", "edits"),
    ("requests_per_edit", "API requests per edit"),
];

/// The metrics shown for each scenario (scenario 7 at any interval), with their labels.
fn shown(scenario: &str) -> &'static [(&'static str, &'static str)] {
    match parse_label(scenario).map_or(scenario, |(kind, _)| kind.as_str()) {
        "timers" => &[
            ("cores", "CPU (cores)"),
            ("rss_mb", "steady RSS (MB)"),
            ("peak_rss_mb", "peak RSS (MB)"),
            ("lat_p50_ms", "lateness p50 (ms)"),
            ("lat_p99_ms", "lateness p99 (ms)"),
            ("lat_p999_ms", "lateness p99.9 (ms)"),
            ("fires_per_s", "fires/s"),
            ("fires_expected_per_s", "fires/s expected"),
            ("cpu_us_per_fire", "CPU per fire (µs)"),
            ("requests_per_s", "API requests/s"),
        ],
        "daemons" => &[
            ("cores", "CPU (cores)"),
            ("rss_mb", "steady RSS (MB)"),
            ("peak_rss_mb", "peak RSS (MB)"),
            ("fires_per_s", "ticks/s"),
            ("requests_per_s", "API requests/s"),
        ],
        "startup" => &[
            ("finalizers_s", "all finalizers (s)"),
            ("first_fires_s", "all first fires (s)"),
            ("startup_s", "start-up (s)"),
            ("objects_per_s", "objects/s (finalizers)"),
            ("requests", "API requests"),
        ],
        "deletion" => &[
            ("deletion_s", "all gone (s)"),
            ("objects_per_s", "objects/s"),
            ("left_objects", "objects left"),
            ("fires_after_gone", "fires after gone"),
            ("requests", "API requests"),
        ],
        "handover" => &[
            ("handover_sigterm_s", "handover after SIGTERM (s)"),
            ("handover_sigkill_s", "handover after SIGKILL (s)"),
            ("exit_code", "exit code of the SIGTERMed leader"),
        ],
        "shards" => SHARDS,
        "admission" => &[
            ("p50_ms", "round trip p50 (ms)"),
            ("p90_ms", "round trip p90 (ms)"),
            ("p99_ms", "round trip p99 (ms)"),
            ("max_ms", "round trip max (ms)"),
            ("rate", "answered/s"),
            ("rate_expected", "requests/s sent"),
            ("failed", "failed"),
            ("cores", "CPU (cores)"),
            ("cpu_us_per_request", "CPU per request (µs)"),
            ("rss_mb", "RSS (MB)"),
        ],
        "children" => CHILDREN,
        "shutdown" => &[
            ("shutdown_s", "exit after SIGTERM (s)"),
            ("daemons_stopped", "daemons that saw the stop"),
            ("exit_code", "exit code"),
        ],
        "timers-write" => &[
            ("cores", "CPU (cores)"),
            ("rss_mb", "steady RSS (MB)"),
            ("fires_per_s", "fires/s"),
            ("fires_expected_per_s", "fires/s expected"),
            ("requests_per_s", "API requests/s"),
            ("requests_per_fire", "API requests per fire"),
            ("lat_p99_ms", "lateness p99 (ms)"),
        ],
        "inproc-timers" | "inproc-daemons" => &[
            ("bytes_per_instance", "bytes per instance"),
            (
                "bytes_per_instance_excl_objects",
                "bytes per instance, excl. the object cache",
            ),
            ("object_cache_bytes", "object cache per object (bytes)"),
            ("cores", "CPU (cores)"),
            ("cores_per_1000", "CPU per 1 000 (cores)"),
            ("rss_mb", "steady RSS (MB)"),
            ("spawn_s", "spawn all (s)"),
            ("fires_per_s", "fires/ticks per s"),
            (
                "fires_expected_per_s",
                "fires/ticks per s expected (N / interval)",
            ),
            ("lat_p50_ms", "lateness p50 (ms)"),
            ("lat_p99_ms", "lateness p99 (ms)"),
            ("lat_p999_ms", "lateness p99.9 (ms)"),
        ],
        _ => &[],
    }
}

/// The heading of a scenario's section; scenario 7 at another interval than 1 s says which.
fn heading(scenario: &str) -> String {
    match parse_label(scenario) {
        Some((kind, interval_s)) if scenario != kind.as_str() => {
            format!("{}, interval {interval_s} s", title(kind.as_str()))
        }
        _ => title(scenario).to_owned(),
    }
}

fn title(scenario: &str) -> &'static str {
    match scenario {
        "timers" => "1. Timers (interval 1 s, no API write)",
        "daemons" => "2. Daemons (sleep on the stop signal, 1 s tick)",
        "startup" => "3. Start-up (objects exist before the operator)",
        "deletion" => "4. Mass deletion",
        "shutdown" => "5. Shutdown with N daemons",
        "timers-write" => "6. Timers that write their result to status",
        "inproc-timers" => "7a. In-process scale: timers (supervisor only)",
        "inproc-daemons" => "7b. In-process scale: daemons (supervisor only)",
        "handover" => "8. Handover between elected replicas (N daemons, client-go timing)",
        "shards" => "9. Sharding: N daemons on 1, 3 and 4 members (client-go timing)",
        "children" => "10. Owned children: N parents × (ConfigMap, Secret, Service)",
        "admission" => "11. Admission webhook round trip (TLS, N requests/s)",
        _ => "other",
    }
}

/// A figure with as many digits as it deserves: 0.0123, 0.12, 12.3, 1234.
pub(crate) fn num(x: f64) -> String {
    let a = x.abs();
    if x == 0.0 {
        "0".into()
    } else if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 0.1 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

fn cell(s: Option<Summary>) -> String {
    s.map_or_else(
        || "–".into(),
        |s| {
            if s.count > 1 {
                format!("{} [{}–{}]", num(s.median), num(s.min), num(s.max))
            } else {
                num(s.median)
            }
        },
    )
}

fn machine_section(r: &Results, md: &mut String) {
    let m = &r.machine;
    let _ = writeln!(md, "## Machine\n");
    let _ = writeln!(md, "- date: {}; commit {}", m.date, m.commit);
    let _ = writeln!(md, "- CPU: {} ({} cores visible)", m.cpu_model, m.nproc);
    let _ = writeln!(md, "- memory: {} GB; kernel {}", m.memory_gb, m.kernel);
    let _ = writeln!(
        md,
        "- {}; {}; harness and Rust arms built in `{}` mode",
        m.rustc, m.python, m.build_profile
    );
    let _ = writeln!(
        md,
        "- kube-apiserver: {} (tools/kube-testenv, with an audit log)",
        m.kube_apiserver
    );
    let loads: Vec<f64> = r
        .trials
        .iter()
        .flat_map(|t| [t.load_before[0], t.load_after[0]])
        .collect();
    if let Some(s) = summarize(&loads) {
        let _ = writeln!(
            md,
            "- 1-minute load average around the trials: median {:.2}, min {:.2}, max {:.2}. The \
             machine is shared with other work (builds); absolute numbers are noisy, so read the \
             medians and the per-pair ratios.",
            s.median, s.min, s.max
        );
    }
    let _ = writeln!(md);
}

/// Renders `report.md`.
pub(crate) fn render(r: &Results) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# kopf-rs vs Python kopf 1.45.2: benchmark report\n");
    let _ = writeln!(
        md,
        "Produced by `bench/` (see `bench/README.md` for the method). Each operator runs as its own \
         process against the same kube-apiserver; CPU (user+sys) and RSS are read from `/proc` \
         from outside; fire instants are stamped by the handlers themselves; API requests are \
         counted from the API server's audit log. Arms run in turn, A B A B …, and every cell \
         below is `median [min–max]` over the pairs; ratios are computed per pair, then \
         summarised.\n"
    );
    machine_section(r, &mut md);
    targets::section(r, &mut md);
    let mut last = String::new();
    for (scenario, n) in r.groups() {
        if scenario != last {
            let _ = writeln!(md, "## {}\n", heading(&scenario));
            last.clone_from(&scenario);
        }
        group_table(r, &scenario, n, &mut md);
    }
    md
}

fn group_table(r: &Results, scenario: &str, n: usize, md: &mut String) {
    let arms = r.arms(scenario, n);
    // The `objects` arm of scenario 7 is a component of kopf-rs's own cost, not a rival: no
    // ratio column for it.
    let others: Vec<&String> = arms
        .iter()
        .filter(|a| *a != "kopf-rs" && *a != "objects")
        .collect();
    let has_rs = arms.iter().any(|a| a == "kopf-rs");
    let pairs = r
        .trials
        .iter()
        .filter(|t| t.scenario == scenario && t.n == n)
        .map(|t| t.pair)
        .max();
    let pairs = pairs.map_or(0, |p| p + 1);
    let plural = if pairs == 1 { "" } else { "s" };
    let _ = writeln!(md, "### N = {n} ({pairs} pair{plural})\n");
    let mut header = String::from("| metric |");
    let mut rule = String::from("|---|");
    for a in &arms {
        let _ = write!(header, " {a} |");
        rule.push_str("---|");
    }
    if has_rs {
        for o in &others {
            let _ = write!(header, " kopf-rs / {o} (per pair) |");
            rule.push_str("---|");
        }
    }
    let _ = writeln!(md, "{header}\n{rule}");
    for (metric, label) in shown(scenario) {
        if arms
            .iter()
            .all(|a| r.summary(scenario, n, a, metric).is_none())
        {
            continue;
        }
        let mut row = format!("| {label} |");
        for a in &arms {
            let _ = write!(row, " {} |", cell(r.summary(scenario, n, a, metric)));
        }
        if has_rs {
            for o in &others {
                let _ = write!(
                    row,
                    " {} |",
                    cell(summarize(&r.ratios(scenario, n, "kopf-rs", o, metric)))
                );
            }
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md);
    for t in r
        .trials
        .iter()
        .filter(|t| t.scenario == scenario && t.n == n)
    {
        for note in t.notes.iter().chain(t.error.iter()) {
            let _ = writeln!(md, "- note ({} pair {}): {note}", t.arm, t.pair);
        }
    }
    let _ = writeln!(md);
}
