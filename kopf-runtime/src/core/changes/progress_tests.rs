//! The tests of `progress.rs`: the record's round trip, its limits and what it trusts.

use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;

use super::super::base::Stored;
use super::super::tests::t;
use super::State::{Done, Failed, Pending, Skipped, Waiting};
use super::*;

fn target(digest: u64) -> DiffBase {
    let size = ("spec.size".to_owned(), Stored::Value(json!(digest % 3)));
    let fields = [size].into_iter().collect();
    DiffBase { digest, fields }
}

fn rec(state: State, retries: u32, started: Option<i64>, message: Option<&str>) -> Record {
    let (started, message) = (started.map(t), message.map(str::to_owned));
    let base = Record {
        state,
        retries,
        ..Record::PENDING
    };
    Record {
        started,
        message,
        ..base
    }
}

fn sample() -> Progress {
    let waiting = rec(Waiting { at: t(60) }, 2, Some(1), Some("403 from S3"));
    let handlers = [
        ("make_bucket", rec(Done, 1, None, None)),
        ("set_acl", waiting),
        ("tag", Record::PENDING),
    ];
    let handlers = handlers.into_iter().map(|(id, r)| (id.to_owned(), r));
    Progress {
        cause: ChangeKind::Update,
        target: target(0x9f2c),
        started: t(0),
        handlers: handlers.collect(),
    }
}

#[test]
fn the_encoding_is_compact_and_round_trips() {
    let text = sample().encode();
    assert_eq!(
        text,
        r#"{"c":"update","h":{"make_bucket":{"n":1,"st":"done"},"set_acl":{"at":"2026-05-28T20:27:40Z","m":"403 from S3","n":2,"s":"2026-05-28T20:26:41Z","st":"wait"},"tag":{}},"s":"2026-05-28T20:26:40Z","t":{"d":"0000000000009f2c","f":{"spec.size":2}},"v":1}"#
    );
    assert_eq!(Progress::decode(&text).unwrap(), sample());
}

/// The rows "Running(n) | outcome" of the transition table ([`super::super::machine`]).
#[test]
fn an_attempt_moves_a_record_out_of_running() {
    let retry = Outcome::Retry {
        delay: Duration::from_secs(5),
        message: "503",
    };
    let failed = Outcome::Failed { message: "403" };
    let waiting = rec(Waiting { at: t(10) }, 1, Some(2), Some("503"));
    let running = rec(Pending, 0, Some(10), None);
    #[rustfmt::skip]
    let rows = [
        ("Running(0), succeeded", &running, Outcome::Succeeded, rec(Done, 1, None, None)),
        ("Running(1), succeeded", &waiting, Outcome::Succeeded, rec(Done, 2, None, None)),
        ("Running(0), retry", &running, retry, rec(Waiting { at: t(15) }, 1, Some(10), Some("503"))),
        ("Running(1), retry", &waiting, retry, rec(Waiting { at: t(15) }, 2, Some(2), Some("503"))),
        ("Running(0), failed", &running, failed, rec(Failed, 1, None, Some("403"))),
        ("Running(0), ignored", &running, Outcome::Ignored, rec(Done, 1, None, None)),
        ("already done elsewhere", &rec(Done, 1, None, None), retry, rec(Done, 1, None, None)),
    ];
    for (row, from, outcome, to) in rows {
        assert_eq!(from.after(outcome, t(10)), to, "row {row}");
    }
    assert_eq!(waiting.skipped(), rec(Skipped, 1, None, None));
}

#[test]
fn bad_input_is_an_error_value() {
    let ok = sample().encode();
    #[rustfmt::skip]
    let cases = [
        ("{", "not JSON"),
        (r#"{"v":7}"#, "format version 7 is unknown"),
        (r#"{"v":1.5}"#, "malformed `v`"),
        (&ok.replace(r#""c":"update""#, r#""c":"upgrade""#), "malformed `c`"),
        (&ok.replace(r#""t":{"d":"0000000000009f2c","#, r#""t":{"#), "malformed `d`"),
        (&ok.replace(r#""s":"2026-05-28T20:26:40Z""#, r#""s":"today""#), "malformed `s`"),
        (&ok.replace(r#""tag":{}"#, r#""tag":[]"#), "malformed `h`"),
        (&ok.replace(r#""st":"done""#, r#""st":"gone""#), "malformed `h.st`"),
        (&ok.replace(r#""n":2"#, r#""n":4294967296"#), "malformed `h.n`"),
        (&ok.replace(r#""at":"2026-05-28T20:27:40Z","#, ""), "malformed `h.at`"),
        (&ok.replace(r#""s":"2026-05-28T20:26:41Z""#, r#""s":1"#), "malformed `h.s`"),
        (&ok.replace(r#""m":"403 from S3""#, r#""m":403"#), "malformed `h.m`"),
    ];
    for (text, error) in cases {
        let err = Progress::decode(text).unwrap_err().to_string();
        assert!(err.starts_with(error), "{text}: {err}");
    }
}

#[test]
fn of_two_changes_a_delete_wins_and_one_change_joins() {
    let delete = Progress {
        cause: ChangeKind::Delete,
        target: target(1),
        ..sample()
    };
    assert_eq!(merge(&sample(), &delete), delete);
    assert_eq!(merge(&delete, &sample()), delete);
    let (mut done, finished) = (sample(), rec(Done, 3, None, None));
    done.handlers.insert("set_acl".to_owned(), finished.clone());
    done.started = t(-5);
    let merged = merge(&sample(), &done);
    assert_eq!(merged.handlers["set_acl"], finished);
    assert_eq!(merged.started, t(-5));
}

fn arb_record() -> impl Strategy<Value = Record> {
    let state = prop_oneof![
        Just(Pending),
        (0..3_i64).prop_map(|s| Waiting { at: t(s) }),
        Just(Skipped),
        Just(Failed),
        Just(Done),
    ];
    let message = prop::option::of(prop_oneof![Just("a"), Just("b\n\"")]);
    (state, 0..3_u32, prop::option::of(0..2_i64), message)
        .prop_map(|(state, n, started, message)| rec(state, n, started, message))
}

fn arb_progress() -> impl Strategy<Value = Progress> {
    let cause = prop_oneof![Just(ChangeKind::Update), Just(ChangeKind::Delete)];
    let handlers = prop::collection::btree_map("[abc]", arb_record(), 0..4);
    (cause, 0..2_u64, 0..3_i64, handlers).prop_map(|(cause, digest, s, handlers)| {
        let sample = Progress {
            cause,
            handlers,
            ..sample()
        };
        Progress {
            target: target(digest),
            started: t(s),
            ..sample
        }
    })
}

proptest! {
    #[test]
    fn progress_round_trips(p in arb_progress()) {
        prop_assert_eq!(Progress::decode(&p.encode()).unwrap(), p);
    }

    #[test]
    fn merge_is_commutative_idempotent_and_associative(
        a in arb_progress(), b in arb_progress(), c in arb_progress(),
    ) {
        prop_assert_eq!(merge(&a, &b), merge(&b, &a));
        prop_assert_eq!(merge(&a, &a), a.clone());
        prop_assert_eq!(merge(&merge(&a, &b), &c), merge(&a, &merge(&b, &c)));
    }

    #[test]
    fn merge_is_monotone(a in arb_progress(), b in arb_progress(), c in arb_progress()) {
        let ab = merge(&a, &b);
        // Never behind an input: merging an input again changes nothing.
        prop_assert_eq!(merge(&ab, &a), ab.clone());
        prop_assert_eq!(merge(&ab, &b), ab.clone());
        if ab.same_change(&a) {
            for (id, mine) in &a.handlers {
                prop_assert_eq!(mine.join(&ab.handlers[id]), ab.handlers[id].clone());
            }
        }
        // Order-preserving: a ≤ a ∨ b implies a ∨ c ≤ (a ∨ b) ∨ c.
        prop_assert_eq!(merge(&merge(&a, &c), &merge(&ab, &c)), merge(&ab, &c));
    }
}
