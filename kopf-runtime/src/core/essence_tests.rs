//! The essence rules as one table: for each edit of an object, which views see a change.

use serde_json::{Value, json};

use super::*;
use crate::core::changes::FieldPath;
use crate::core::changes::essence::{EssenceCfg, digest};

const FIN: &str = "kopf.dev/finalizer";
const PREFIX: &str = "kopf.dev/";
const OWNER: Owner<'static> = Owner {
    prefix: PREFIX,
    finalizer: FIN,
};
const PHASE: FieldPath = FieldPath {
    path: "status.phase",
    segments: &["status", "phase"],
};

fn base() -> Value {
    json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {
            "name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "1",
            "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "x"}, "annotations": {"team": "blue"}, "finalizers": [FIN],
        },
        "spec": {"size": 1},
        "status": {"phase": "Ready", "other": 1},
    })
}

/// `body` with `value` at `path` (objects created on the way; `null` removes the key).
fn with(mut body: Value, path: &[&str], value: Value) -> Value {
    let (last, parents) = path.split_last().expect("a path");
    let mut slot = &mut body;
    for key in parents {
        slot = slot
            .as_object_mut()
            .expect("an object")
            .entry(*key)
            .or_insert_with(|| json!({}));
    }
    let map = slot.as_object_mut().expect("an object");
    if value.is_null() {
        map.remove(*last);
    } else {
        map.insert((*last).to_owned(), value);
    }
    body
}

/// Which views see a change from `old` to `new`: `c`hange, `d`iff and `i`dle, or `-`.
fn seen(old: &Value, new: &Value) -> String {
    let cfg = EssenceCfg {
        own_prefix: PREFIX,
        watched: &[PHASE],
    };
    let flags = [
        digest(old, &cfg) != digest(new, &cfg),
        essence(old, View::Diff, OWNER) != essence(new, View::Diff, OWNER),
        idle_fingerprint(old, OWNER) != idle_fingerprint(new, OWNER),
    ];
    (flags.iter().zip(['c', 'd', 'i']))
        .map(|(seen, flag)| if *seen { flag } else { '-' })
        .collect()
}

/// An edit: where, and the value put there (`null`: removed).
type Edit = (Vec<&'static str>, Value);

/// The edit of a metadata field.
fn meta(key: &'static str, value: Value) -> Edit {
    (vec!["metadata", key], value)
}

/// The edit of an annotation.
fn note(key: &'static str, value: &str) -> Edit {
    (vec!["metadata", "annotations", key], json!(value))
}

#[test]
fn each_view_sees_the_changes_of_its_rules() {
    let book = r#"{"d":"0000000000000001","u":"u1","v":1}"#;
    let time = "2026-06-01T10:00:00Z";
    let (kopf, kubectl) = (
        "kopf.zalando.org/last-handled-configuration",
        "kubectl.kubernetes.io/last-applied-configuration",
    );
    #[rustfmt::skip]
    let table: Vec<(&str, Edit, &str)> = vec![
        // what is edited       where, to what                                        seen by
        ("spec",                (vec!["spec", "size"], json!(2)),                     "cdi"),
        ("a top-level key",     (vec!["data"], json!({"k": "v"})),                    "cdi"),
        ("a label",             (vec!["metadata", "labels", "app"], json!("y")),      "cdi"),
        ("a user's annotation", note("team", "red"),                                  "cdi"),
        ("our annotation",      note("kopf.dev/x", "1"),                              "---"),
        ("our diff base",       note("kopf.dev/op.last-handled", book),               "---"),
        ("our progress",        note("kopf.dev/op.progress", book),                   "---"),
        ("another's diff base", note("b.example.com/b.last-handled", book),           "---"),
        ("another's cron",      note("b.example.com/b.t.cron", time),                 "---"),
        ("a look-alike",        note("x.io/job.cron", "@daily"),                      "cdi"),
        ("kopf's diff base",    note(kopf, "{}"),                                     "--i"),
        ("kubectl's copy",      note(kubectl, "{}"),                                  "--i"),
        ("a watched status",    (vec!["status", "phase"], json!("Failed")),           "c--"),
        ("another status",      (vec!["status", "other"], json!(2)),                  "---"),
        ("no status",           (vec!["status"], Value::Null),                        "c--"),
        ("resourceVersion",     meta("resourceVersion", json!("2")),                  "---"),
        ("generation",          meta("generation", json!(2)),                         "---"),
        ("managedFields",       meta("managedFields", json!([{}])),                   "---"),
        ("deletionTimestamp",   meta("deletionTimestamp", json!(time)),               "---"),
        ("no finalizer",        meta("finalizers", Value::Null),                      "---"),
        ("another finalizer",   meta("finalizers", json!([FIN, "x.io/keep"])),        "--i"),
        ("ownerReferences",     meta("ownerReferences", json!([{"uid": "p"}])),       "--i"),
        ("apiVersion",          (vec!["apiVersion"], json!("kopf.dev/v2")),           "--i"),
    ];
    for (what, (path, value), expected) in table {
        let edited = with(base(), &path, value);
        assert_eq!(seen(&base(), &edited), expected, "{what}");
    }
}

#[test]
fn annotations_and_labels_left_empty_count_as_absent_where_the_view_says() {
    let mut bare = base();
    let meta = bare["metadata"].as_object_mut().unwrap();
    meta.remove("annotations");
    // Only bookkeeping: the annotations are absent in every view.
    let booked = with(
        bare.clone(),
        &["metadata", "annotations", "kopf.dev/x"],
        json!("1"),
    );
    assert_eq!(seen(&bare, &booked), "---");
    let emptied = with(bare.clone(), &["metadata", "annotations"], json!({}));
    assert_eq!(seen(&bare, &emptied), "---");
    // Empty labels are absent for the change view only (the diff names them; idle resets).
    let unlabelled = with(bare.clone(), &["metadata", "labels"], Value::Null);
    let empty = with(bare, &["metadata", "labels"], json!({}));
    assert_eq!(seen(&unlabelled, &empty), "-di");
}

#[test]
fn the_diff_view_is_the_owners_part_and_the_idle_view_the_rest() {
    let body = with(
        base(),
        &["metadata", "annotations", "kopf.dev/x"],
        json!("1"),
    );
    assert_eq!(
        essence(&body, View::Diff, OWNER),
        json!({"metadata": {"annotations": {"team": "blue"}, "labels": {"app": "x"}},
            "spec": {"size": 1}})
    );
    assert_eq!(
        essence(&body, View::Idle, OWNER),
        json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"app": "x"},
                "annotations": {"team": "blue"}},
            "spec": {"size": 1}})
    );
}

#[test]
fn an_empty_prefix_keeps_every_annotation_and_non_objects_are_kept() {
    let body = with(
        base(),
        &["metadata", "annotations", "kopf.dev/x"],
        json!("1"),
    );
    let unowned = Owner {
        prefix: "",
        finalizer: FIN,
    };
    for view in [View::Diff, View::Idle] {
        let kept = essence(&body, view, unowned);
        assert_eq!(
            kept["metadata"]["annotations"]["kopf.dev/x"], "1",
            "{view:?}"
        );
    }
    assert_eq!(essence(&json!(3), View::Idle, OWNER), json!(3));
    assert_eq!(essence(&json!(3), View::Diff, OWNER), json!({}));
    let odd = json!({"metadata": null, "spec": 1});
    assert_eq!(essence(&odd, View::Idle, OWNER), odd);
    assert_eq!(essence(&odd, View::Diff, OWNER), json!({"spec": 1}));
}

#[test]
fn key_order_does_not_matter_but_values_do() {
    let a: Value = serde_json::from_str(r#"{"x": 1, "y": [1, 2], "z": null}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"z": null, "y": [1, 2], "x": 1}"#).unwrap();
    let c: Value = serde_json::from_str(r#"{"z": null, "y": [2, 1], "x": 1}"#).unwrap();
    assert_eq!(hash_value(&a), hash_value(&b));
    assert_ne!(hash_value(&a), hash_value(&c));
    assert_ne!(hash_value(&json!(true)), hash_value(&json!("true")));
    assert_ne!(hash_value(&json!([])), hash_value(&json!({})));
}
