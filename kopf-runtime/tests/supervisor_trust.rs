//! What a user can write on an object must not drive the operator: a delete progress on a live
//! object never runs `on_delete`, and the progress and diff base copied onto another object (a
//! clone made from exported YAML) are ignored there. Also: the keys of earlier versions are
//! still read. Paused tokio time; no patch sink (the state lives in memory).

mod common;

use common::*;
use kopf_runtime::engine::{CronSchedule, HandlerKind, Missed, SupervisorConfig, WallClock};

const PROGRESS: &str = "kopf.dev/finalizer.progress";
const BASE: &str = "kopf.dev/finalizer.last-handled";
const FINALIZER: &str = "kopf.dev/finalizer";

/// A delete change that has not run `cleanup` yet (as in YAML exported during a deletion).
const DELETE: &str = r#"{"c":"delete","h":{"cleanup":{}},"s":"2026-01-01T00:00:00Z","t":{"d":"0000000000000000"},"v":1}"#;

/// A create change where `made` is done and `second` is not, written for the object `uid`.
fn half_created(uid: &str) -> String {
    format!(
        r#"{{"c":"create","h":{{"made":{{"n":1,"st":"done"}},"second":{{}}}},"s":"2026-01-01T00:00:00Z","t":{{"d":"0000000000000000"}},"u":"{uid}","v":1}}"#
    )
}

/// A diff base written for the object `uid` (`None`: before UIDs were written).
fn base(uid: Option<&str>) -> String {
    let owner = uid
        .map(|uid| format!(r#","u":"{uid}""#))
        .unwrap_or_default();
    format!(r#"{{"d":"0000000000000000"{owner},"v":1}}"#)
}

/// How many times `made`, `second` and `cleanup` ran within a second for `obj`, with the
/// operator's finalizer `finalizer`.
async fn calls(obj: &Obj, finalizer: &'static str) -> [usize; 3] {
    let handlers = vec![
        change(HandlerKind::Create, "made"),
        change(HandlerKind::Create, "second"),
        change(HandlerKind::Delete, "cleanup"),
    ];
    let config = SupervisorConfig {
        finalizer: finalizer.into(),
        ..config()
    };
    let h = Harness::with_config(handlers, config);
    h.observe(obj);
    h.at(1000).await;
    ["made", "second", "cleanup"].map(|id| h.log.calls(id).len())
}

#[tokio::test(start_paused = true)]
async fn stored_state_is_trusted_only_on_its_own_object() {
    let live = Obj::new("u1").finalizer(FINALIZER);
    let clone = Obj::new("u2").finalizer(FINALIZER);
    let custom = "a.example.com/finalizer";
    let ours = base(Some("u1"));
    #[rustfmt::skip]
    let rows: [(&str, Obj, &'static str, [usize; 3]); 10] = [
        ("a delete progress on a live object: ignored, the object is new",
            live.clone().annotation(PROGRESS, DELETE), FINALIZER, [1, 1, 0]),
        ("the same on an object being deleted: the delete goes on",
            live.clone().annotation(PROGRESS, DELETE).deleting(), FINALIZER, [0, 0, 1]),
        ("a create in flight on its object: goes on",
            live.clone().annotation(PROGRESS, &half_created("u1")), FINALIZER, [0, 1, 0]),
        ("the same copied onto a clone: the clone is created",
            clone.clone().annotation(PROGRESS, &half_created("u1")), FINALIZER, [1, 1, 0]),
        ("a base on its object: nothing to do",
            live.clone().annotation(BASE, &ours), FINALIZER, [0, 0, 0]),
        ("a base written before UIDs were: read",
            live.clone().annotation(BASE, &base(None)), FINALIZER, [0, 0, 0]),
        ("a base copied onto a clone: the clone is created",
            clone.clone().annotation(BASE, &ours), FINALIZER, [1, 1, 0]),
        ("a custom finalizer: its own keys",
            live.clone().annotation("kopf.dev/a.example.com_finalizer.last-handled", &ours),
            custom, [0, 0, 0]),
        ("a custom finalizer: the key of earlier versions is read",
            live.clone().annotation(BASE, &ours), custom, [0, 0, 0]),
        ("a custom finalizer: another operator's new key is not",
            live.clone().annotation("kopf.dev/b.example.com_finalizer.last-handled", &ours),
            custom, [1, 1, 0]),
    ];
    for (row, obj, finalizer, want) in rows {
        assert_eq!(calls(&obj, finalizer).await, want, "{row}");
    }
}

#[tokio::test(start_paused = true)]
async fn cron_records_are_the_operators_and_the_old_one_is_read_while_absent() {
    let run = |annotations: Vec<(&'static str, &'static str)>| async move {
        let t = timer("t").with(|s| {
            s.schedule.cron = Some(CronSchedule {
                expr: "0 * * * *",
                tz: "UTC",
                missed: Missed::RunOnce,
            });
        });
        let clock = WallClock::following_tokio("2026-12-01T12:30:00Z".parse().expect("a time"));
        let config = SupervisorConfig {
            wall_clock: clock,
            ..config()
        };
        let h = Harness::with_config(vec![t], config);
        let mut obj = Obj::new("u1").created("2026-12-01T08:00:00Z");
        for (key, value) in annotations {
            obj = obj.annotation(key, value);
        }
        h.observe(&obj);
        h.at(1000).await;
        h.log.calls("t").len()
    };
    let (new, old) = ("kopf.dev/finalizer.t.cron", "kopf.dev/t.cron");
    let (ran, earlier) = ("2026-12-01T12:00:00Z", "2026-12-01T09:00:00Z");
    #[rustfmt::skip]
    let rows = [
        ("no record: the missed 12:00 runs once", vec![], 1),
        ("the operator's record", vec![(new, ran)], 0),
        ("only the old record: read", vec![(old, ran)], 0),
        ("the operator's record wins over the old one", vec![(new, earlier), (old, ran)], 1),
        ("another operator's record is not read", vec![("kopf.dev/other.t.cron", ran)], 1),
    ];
    for (row, annotations, want) in rows {
        assert_eq!(run(annotations).await, want, "{row}");
    }
}
