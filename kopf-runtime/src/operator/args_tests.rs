//! The command line's parsing, and its merge into the builder's options.

use super::*;

fn parse(args: &[&str]) -> Result<OperatorArgs, clap::Error> {
    OperatorArgs::try_parse_from(std::iter::once("op").chain(args.iter().copied()))
}

#[test]
fn values_parse_and_wrong_ones_are_refused() {
    assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
    for bad in ["5", "s", "5 s", "5d", "-1s"] {
        assert!(duration(bad).is_err(), "{bad}");
    }
    assert!(lease("ns/name").is_ok());
    for bad in ["name", "/name", "ns/", "a/b/c"] {
        assert!(lease(bad).is_err(), "{bad}");
    }
    let args = parse(&["-n", "a,b", "-n", "c", "--json", "--log-level", "debug"]).unwrap();
    assert_eq!(args.namespaces, ["a", "b", "c"]);
    assert_eq!(args.format(), Some(LogFormat::Json));
    assert_eq!(args.log_level, Some(LevelFilter::DEBUG));
    for bad in [
        &["-n", "a", "-A"][..],
        &["--leader-election", "a/b", "--sharding", "a/c"],
        &["--log-level", "loud"],
        &["--health", "nowhere"],
    ] {
        let err = parse(bad).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{bad:?}: {err}");
    }
}

#[test]
fn no_metrics_turns_the_metrics_off_and_its_absence_keeps_them() {
    let builder = crate::Operator::builder().args(&parse(&[]).unwrap());
    assert!(builder.options().metrics);
    let builder = crate::Operator::builder().args(&parse(&["--no-metrics"]).unwrap());
    assert!(!builder.options().metrics);
    let off = crate::Operator::builder().metrics(false);
    assert!(
        !off.args(&parse(&[]).unwrap()).options().metrics,
        "the flag only turns off"
    );
}

#[test]
fn coordination_takes_the_timing() {
    let args = parse(&[
        "--sharding",
        "ops/group",
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "1s",
        "--identity",
        "pod-0",
    ])
    .unwrap();
    let sharding = args.sharding().unwrap();
    assert_eq!(sharding.lease.name, "group");
    assert_eq!(sharding.lease.lease_duration, Duration::from_secs(4));
    assert_eq!(sharding.lease.identity.as_deref(), Some("pod-0"));
    assert!(args.election().is_none());
}

#[test]
fn an_absent_log_flag_keeps_the_programs_choice() {
    let given = || {
        crate::Operator::builder()
            .log_format(LogFormat::Json)
            .log_level(LevelFilter::WARN)
    };
    let kept = given().args(&parse(&[]).unwrap());
    assert_eq!(kept.options().log_format, Some(LogFormat::Json));
    assert_eq!(kept.options().log_level, Some(LevelFilter::WARN));
    // Positive control: a flag wins over the program's choice.
    let flags = parse(&["--log-format", "human", "--log-level", "debug"]).unwrap();
    let overridden = given().args(&flags);
    assert_eq!(overridden.options().log_format, Some(LogFormat::Human));
    assert_eq!(overridden.options().log_level, Some(LevelFilter::DEBUG));
    // Neither in the program nor on the command line: human lines at the default level.
    let neither = crate::Operator::builder().args(&parse(&[]).unwrap());
    assert_eq!(neither.options().log_format, Some(LogFormat::Human));
    assert_eq!(neither.options().log_level, None);
}

#[test]
fn all_namespaces_overrides_the_programs_namespaces() {
    let given = || crate::Operator::builder().namespaces(["a", "b"]);
    let all = given().args(&parse(&["-A"]).unwrap());
    assert!(all.options().namespaces.is_empty(), "every namespace");
    // Positive control: without the flag the program's namespaces stay.
    let kept = given().args(&parse(&[]).unwrap());
    assert_eq!(kept.options().namespaces, ["a", "b"]);
}

#[test]
fn blocking_threads_and_default_backoff_reach_the_options() {
    let args = parse(&["--max-blocking-threads", "8", "--default-backoff", "10s"]).unwrap();
    let builder = crate::Operator::builder().args(&args);
    assert_eq!(builder.options().max_blocking_threads, 8);
    assert_eq!(
        builder.options().default_backoff,
        Some(Duration::from_secs(10))
    );
    // Positive control: without the flags, the program's values stay.
    let given = (crate::Operator::builder())
        .max_blocking_threads(4)
        .default_backoff(Duration::from_secs(3));
    let kept = given.args(&parse(&[]).unwrap());
    assert_eq!(kept.options().max_blocking_threads, 4);
    assert_eq!(kept.options().default_backoff, Some(Duration::from_secs(3)));
}

#[test]
fn timing_and_identity_flags_reach_a_coordination_set_in_code() {
    use crate::ha::{LeaderElection, Sharding};
    let flags = parse(&["--lease-duration", "4s", "--identity", "pod-9"]).unwrap();
    let elected = crate::Operator::builder().leader_election(LeaderElection::new("l", "ns"));
    let election = elected.args(&flags).options().leader_election.clone();
    let election = election.expect("the election set in code stays");
    assert_eq!(election.lease_duration, Duration::from_secs(4));
    assert_eq!(election.identity.as_deref(), Some("pod-9"));
    let sharded = crate::Operator::builder().sharding(Sharding::new("g", "ns"));
    let sharding = sharded.args(&flags).options().sharding.clone();
    let lease = sharding.expect("the sharding set in code stays").lease;
    assert_eq!(lease.lease_duration, Duration::from_secs(4));
    // Positive control: without the flags, the code's timing stays.
    let elected = crate::Operator::builder().leader_election(LeaderElection::new("l", "ns"));
    let kept = elected
        .args(&parse(&[]).unwrap())
        .options()
        .leader_election
        .clone();
    let default = LeaderElection::new("l", "ns").lease_duration;
    assert_eq!(kept.expect("kept").lease_duration, default);
}

#[test]
fn identity_names_the_replica_in_its_events() {
    let args = parse(&["--identity", "pod-7"]).unwrap();
    let builder = crate::Operator::builder().args(&args);
    assert_eq!(builder.options().instance.as_deref(), Some("pod-7"));
}

#[test]
fn request_timeout_reaches_the_options() {
    let args = parse(&["--request-timeout", "10s"]).unwrap();
    assert_eq!(args.request_timeout, Some(Duration::from_secs(10)));
    let builder = crate::Operator::builder().args(&args);
    assert_eq!(
        builder.options().request_timeout,
        Some(Duration::from_secs(10))
    );
    // Positive control: without the flag, the builder's own value stays.
    let given = crate::Operator::builder().request_timeout(Duration::from_secs(3));
    let kept = given.args(&parse(&[]).unwrap());
    assert_eq!(kept.options().request_timeout, Some(Duration::from_secs(3)));
}

#[test]
fn watch_timeouts_reach_the_options() {
    let flags = [
        "--watch-idle-timeout",
        "1m",
        "--watch-recovery-timeout",
        "5m",
    ];
    let args = parse(&flags).unwrap();
    let builder = crate::Operator::builder().args(&args);
    let limits = builder.options().watch_limits;
    assert_eq!(limits.idle, Duration::from_secs(60));
    assert_eq!(limits.recovery, Duration::from_secs(300));
    // Positive control: without the flags, the builder's own values stay.
    let given = crate::Operator::builder()
        .watch_idle_timeout(Duration::from_secs(7))
        .watch_recovery_timeout(Duration::from_secs(9));
    let kept = given.args(&parse(&[]).unwrap()).options().watch_limits;
    assert_eq!(kept.idle, Duration::from_secs(7));
    assert_eq!(kept.recovery, Duration::from_secs(9));
}
