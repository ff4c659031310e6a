//! What one step of a change writes: the two annotations, plus the handler's result
//! (`status.<id>`) and its own patch, as one JSON merge patch without the parts that would
//! change nothing.

use serde_json::{Map, Value};

use super::ChangeKind;
use super::base::DiffBase;
use super::progress::Progress;
use crate::core::keys::Keys;
use crate::core::result_patch::put_result;

/// What one step of a change writes (one logical patch).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ChangeWrite {
    /// The progress annotation: `Some(None)` removes it.
    pub(crate) progress: Option<Option<Progress>>,
    /// The new diff base.
    pub(crate) base: Option<DiffBase>,
    /// The handler's result, for `status.<id>` (the caller adds it).
    pub(crate) result: Option<Value>,
    /// The handler's own merge patch (the caller adds it).
    pub(crate) user: Option<Value>,
}

impl ChangeWrite {
    /// The framework's part of a step of the change `progress` (`last`: the change is over).
    /// A create or update ends by writing its target as the base and removing the progress;
    /// its other steps, and every step of a delete, write the progress (a delete keeps its
    /// final one); a resume persists nothing of its own.
    #[must_use]
    pub(crate) fn step(progress: &Progress, last: bool) -> Self {
        match progress.cause {
            ChangeKind::Resume => Self::default(),
            ChangeKind::Create | ChangeKind::Update if last => Self {
                progress: Some(None),
                base: Some(progress.target.clone()),
                ..Self::default()
            },
            ChangeKind::Create | ChangeKind::Update | ChangeKind::Delete => Self {
                progress: Some(Some(progress.clone())),
                ..Self::default()
            },
        }
    }

    #[cfg(test)]
    /// Whether the step writes the diff base (the change is over).
    #[must_use]
    pub(crate) fn writes_base(&self) -> bool {
        self.base.is_some()
    }

    /// The merge patch for the object `body` (its latest version, whose UID is `uid`) of the
    /// handler `handler`: the user's patch, the annotations (bound to `uid`) and
    /// `status.<handler>`, without the entries that already hold their value. `None`: nothing
    /// to write. A user patch that is not an object is left out (the caller warns, as for
    /// daemons and timers). Each write of the progress also removes the progress of earlier
    /// versions ([`Keys::legacy`]), if any.
    #[must_use]
    pub(crate) fn into_patch(
        self,
        keys: &Keys,
        handler: &str,
        body: &Value,
        uid: &str,
    ) -> Option<Value> {
        let mut patch = match self.user {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        };
        let mut annotations = Map::new();
        if let Some(progress) = self.progress {
            let value = progress.map_or(Value::Null, |p| p.encode_bound(Some(uid)).into());
            annotations.insert(keys.progress.clone(), value);
            if let Some(legacy) = &keys.legacy {
                annotations.insert(legacy.progress.clone(), Value::Null);
            }
        }
        if let Some(base) = self.base {
            let value = base.encode_bound(Some(uid)).into();
            annotations.insert(keys.base.clone(), value);
        }
        if !annotations.is_empty() {
            merge_at(&mut patch, &["metadata", "annotations"], annotations);
        }
        if let Some(result) = self.result {
            put_result(&mut patch, handler, result);
        }
        prune(&Value::Object(patch), Some(body))
    }
}

/// Adds `entries` to the object at `path` in `patch` (created, or replacing a non-object).
fn merge_at(patch: &mut Map<String, Value>, path: &[&str], entries: Map<String, Value>) {
    let Some((first, rest)) = path.split_first() else {
        patch.extend(entries);
        return;
    };
    let slot = patch
        .entry((*first).to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    if let Value::Object(inner) = slot {
        merge_at(inner, rest, entries);
    }
}

/// The part of the merge patch `patch` that changes `target` (`None`: absent), or `None` if
/// applying it would change nothing.
fn prune(patch: &Value, target: Option<&Value>) -> Option<Value> {
    let Value::Object(entries) = patch else {
        return (target != Some(patch)).then(|| patch.clone());
    };
    let Some(Value::Object(current)) = target else {
        // A new object, or one replacing a non-object: written as it is.
        return Some(patch.clone());
    };
    let kept: Map<String, Value> = entries
        .iter()
        .filter_map(|(key, value)| {
            let now = current.get(key);
            let kept = if value.is_null() {
                now.is_some().then_some(Value::Null)
            } else {
                prune(value, now)
            };
            Some((key.clone(), kept?))
        })
        .collect();
    (!kept.is_empty()).then_some(Value::Object(kept))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use proptest::prelude::*;
    use serde_json::json;

    use super::super::Outcome;
    use super::super::base::DiffBase;
    use super::super::format::{MESSAGE_CAP, time, truncate_message};
    use super::super::json::json_str_len;
    use super::super::machine::{ChangeRun, Step};
    use super::super::progress::{Record, State, merge};
    use super::super::tests::{body, seen, set, t};
    use super::*;
    use ChangeKind::{Create, Delete, Resume};

    #[test]
    fn messages_are_cut_to_200_bytes_of_json() {
        assert_eq!(truncate_message("short"), "short");
        let long = truncate_message(&"é".repeat(300));
        assert!(long.ends_with('…') && long.len() <= MESSAGE_CAP);
        let quoted = truncate_message(&"\"".repeat(300));
        assert_eq!(json_str_len(&quoted) - 2, 98 * 2 + 3);
        let exact = "x".repeat(MESSAGE_CAP);
        assert_eq!(truncate_message(&exact), exact);
        assert!(time(Some(&json!("2026-01-01T00:00:00+01:00"))).is_some());
        assert!(time(Some(&json!(1))).is_none() && time(None).is_none());
    }

    fn keys() -> Keys {
        Keys::new("kopf.dev/", "op")
    }

    /// A base, and its annotation on the object `u1`.
    fn base() -> (DiffBase, &'static str) {
        let base = DiffBase {
            digest: 1,
            fields: std::collections::BTreeMap::new(),
        };
        (base, r#"{"d":"0000000000000001","u":"u1","v":1}"#)
    }

    #[test]
    fn one_patch_holds_annotations_result_and_the_users_patch() {
        let write = ChangeWrite {
            progress: Some(None),
            base: Some(base().0),
            result: Some(json!({"ok": true})),
            user: Some(json!({"metadata": {"labels": {"done": "yes"}}, "spec": {"x": 1}})),
        };
        let body = json!({"metadata": {"annotations": {"kopf.dev/op.progress": "{}"}}});
        assert!(write.writes_base());
        assert_eq!(
            write.into_patch(&keys(), "make", &body, "u1"),
            Some(json!({
                "metadata": {
                    "labels": {"done": "yes"},
                    "annotations": {"kopf.dev/op.progress": null, "kopf.dev/op.last-handled": base().1},
                },
                "spec": {"x": 1},
                "status": {"make": {"ok": true}},
            }))
        );
    }

    #[test]
    fn what_is_already_there_is_not_written() {
        let body = json!({
            "metadata": {"annotations": {"kopf.dev/op.last-handled": base().1}},
            "spec": {"x": 1},
            "status": {"make": {"ok": true, "n": 1}, "flat": 1},
        });
        let set = set();
        let start = ChangeRun::start(Create, &set, None, &seen(&set, &body), t(0));
        let progress = start.progress().clone();
        let patch = |progress: Option<Option<Progress>>, result, user| {
            let base = Some(base().0);
            let write = ChangeWrite {
                progress,
                base,
                result,
                user,
            };
            write.into_patch(&keys(), "make", &body, "u1")
        };
        let user = json!({"spec": {"x": 1, "gone": null}});
        assert_eq!(
            patch(Some(None), Some(json!({"ok": true})), Some(user)),
            None
        );
        let list = json!(["not", "an", "object"]);
        let text = progress.encode_bound(Some("u1"));
        assert_eq!(
            patch(Some(Some(progress)), Some(json!({"ok": false})), Some(list)),
            Some(json!({
                "metadata": {"annotations": {"kopf.dev/op.progress": text}},
                "status": {"make": {"ok": false}},
            }))
        );
        let user = json!({"status": {"flat": {}}});
        let flat = json!({"status": {"flat": {}}}); // `{}` merged into `make` changes nothing
        assert_eq!(patch(None, Some(json!({})), Some(user)), Some(flat));
    }

    /// What is written is bound to the object; a copy on another object is refused, a value
    /// written before UIDs were (no `u`) is read; the old progress key goes with each write.
    #[test]
    fn the_annotations_are_bound_to_the_object() {
        let (base, text) = base();
        #[rustfmt::skip]
        let rows = [
            ("this object", text, "u1", Some(base.clone())),
            ("a copy", text, "u2", None),
            ("written before UIDs", r#"{"d":"0000000000000001","v":1}"#, "u2", Some(base.clone())),
            ("a bad UID", r#"{"d":"0000000000000001","u":7,"v":1}"#, "u1", None),
        ];
        for (row, text, uid, want) in rows {
            assert_eq!(DiffBase::decode_for(text, uid).ok(), want, "row {row}");
        }
        let err = DiffBase::decode_for(text, "u2").unwrap_err().to_string();
        assert!(err.contains("UID u1"), "{err}");
        let set = set();
        let mut run = ChangeRun::start(Delete, &set, None, &seen(&set, &body("x", 1)), t(0));
        run.next(t(0), &|_| true);
        let write = run.complete(4, Outcome::Succeeded, t(1)).unwrap();
        let stored = write.progress.clone().flatten().unwrap();
        let keys = Keys::of_operator("kopf.dev/", "a.example.com/finalizer");
        let old = json!({"metadata": {"annotations": {"kopf.dev/finalizer.progress": "{}"}}});
        let patch = write.clone().into_patch(&keys, "d", &old, "u1").unwrap();
        let annotations = &patch["metadata"]["annotations"];
        assert_eq!(annotations["kopf.dev/finalizer.progress"], Value::Null);
        let text = annotations["kopf.dev/a.example.com_finalizer.progress"]
            .as_str()
            .unwrap();
        assert_eq!(Progress::decode_for(text, "u1").unwrap(), stored);
        assert!(Progress::decode_for(text, "u2").is_err());
        let bare = json!({"metadata": {"annotations": {}}});
        let none = write.into_patch(&keys, "d", &bare, "u1").unwrap();
        let annotations = none["metadata"]["annotations"].as_object().unwrap();
        assert_eq!(
            annotations.len(),
            1,
            "no removal of an absent key: {annotations:?}"
        );
    }

    #[test]
    fn keys_are_named_after_the_operator_and_fit() {
        let keys = Keys::new("kopf.dev/", "bucket-operator");
        assert_eq!(keys.progress, "kopf.dev/bucket-operator.progress");
        assert_eq!(keys.base, "kopf.dev/bucket-operator.last-handled");
        let long = Keys::new("kopf.dev/", &"o".repeat(70));
        for key in [&long.progress, &long.base] {
            assert_eq!(key.trim_start_matches("kopf.dev/").len(), 63);
        }
        assert!(long.base.ends_with(".last-handled") && long.progress.ends_with(".progress"));
    }

    #[derive(Debug, Clone, Copy)]
    enum Op {
        Next(u8),
        Complete(u8),
        Stop,
        Reload,
        Absorb,
        Tick(u8),
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u8>().prop_map(Op::Next),
            4 => any::<u8>().prop_map(Op::Complete),
            1 => Just(Op::Stop),
            1 => Just(Op::Reload),
            1 => Just(Op::Absorb),
            2 => any::<u8>().prop_map(Op::Tick),
        ]
    }

    fn outcome(kind: u8) -> Outcome<'static> {
        match kind % 4 {
            0 => Outcome::Succeeded,
            1 => Outcome::Ignored,
            2 => Outcome::Retry {
                delay: Duration::from_secs(u64::from(kind)),
                message: "e",
            },
            _ => Outcome::Failed { message: "f" },
        }
    }

    proptest! {
        /// Reading never panics, whatever the annotation holds.
        #[test]
        fn decoding_never_panics(text in "\\PC{0,80}", json in r#"[{}\[\]":,0-9a-z#=TZ .-]{0,80}"#) {
            let ok = r#"{"c":"create","h":{"a":{"n":1,"st":"done"},"b":{}},"s":"2026-01-01T00:00:00Z","t":{"d":"0000000000000001","f":{"spec.size":1}},"v":1}"#;
            prop_assert!(Progress::decode(ok).is_ok());
            for text in [text.clone(), json.clone(), format!("{}{json}", &ok[..ok.len() / 2])] {
                let _ = (Progress::decode(&text), DiffBase::decode(&text));
            }
            for hole in ["{}", "1", "done", "spec.size", "2026-01-01T00:00:00Z"] {
                let _ = Progress::decode(&ok.replacen(hole, &json, 1));
            }
            let _ = DiffBase::decode(&format!(r#"{{"v":1,"d":"0000000000000000","f":{json}}}"#));
        }

        /// The invariants of §4.4 over random runs of a create change with two handlers, its
        /// writes persisted as they come, reloads from them and merges of stale copies.
        #[test]
        fn the_writes_of_random_runs_keep_the_invariants(ops in prop::collection::vec(arb_op(), 1..60)) {
            let (set, new) = (set(), body("x", 1));
            let observed = seen(&set, &new);
            let mut run = ChangeRun::start(Create, &set, None, &observed, t(0));
            let (mut now, mut stored, mut first) = (t(0), None::<Progress>, None::<Progress>);
            let mut done = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Next(mask) => match run.next(now, &|i| mask & (1 << i) != 0) {
                        Step::Run { index, .. } => {
                            prop_assert!(!done.contains(&index), "a done handler runs again");
                            prop_assert_eq!(run.next(now, &|_| true), Step::Running { index });
                        }
                        Step::Finished(Some(write)) => {
                            prop_assert!(write.writes_base());
                            break;
                        }
                        Step::Wait { .. } | Step::Running { .. } | Step::Finished(None) => {}
                    },
                    Op::Complete(kind) => {
                        let Some(index) = run.running() else {
                            prop_assert_eq!(run.complete(0, Outcome::Succeeded, now), None);
                            continue;
                        };
                        let write = run.complete(index, outcome(kind), now);
                        prop_assert!(write.is_some(), "one write per transition");
                        let Some(Some(written)) = write.and_then(|w| w.progress) else { break };
                        if let Some(before) = &stored {
                            prop_assert_eq!(&merge(before, &written), &written, "progress regressed");
                        }
                        for (id, record) in &written.handlers {
                            if record.state == State::Done {
                                done.insert(set.all().iter().find(|h| h.id == id).unwrap().index);
                            }
                        }
                        first.get_or_insert_with(|| written.clone());
                        stored = Some(written);
                    }
                    Op::Stop => run.stop(),
                    Op::Reload => {
                        run = match &stored {
                            Some(stored) => ChangeRun::resume(stored.clone(), &set),
                            None => ChangeRun::start(Create, &set, None, &observed, now),
                        };
                    }
                    Op::Absorb => {
                        if let Some(old) = &first {
                            let before = run.progress().clone();
                            prop_assert!(run.absorb(old));
                            prop_assert_eq!(&merge(&before, run.progress()), run.progress());
                        }
                    }
                    Op::Tick(secs) => {
                        now = now.saturating_add(Duration::from_secs(u64::from(secs))).unwrap();
                    }
                }
            }
        }
    }

    #[test]
    fn deletes_keep_their_final_progress_and_resumes_persist_nothing() {
        let set = set();
        let new = body("x", 1);
        let observed = seen(&set, &new);
        let mut run = ChangeRun::start(Delete, &set, None, &observed, t(0));
        assert!(run.holds_finalizer());
        run.next(t(0), &|i| i == 4);
        run.complete(4, Outcome::Succeeded, t(1)).unwrap();
        // The optional delete handler `o` is skipped: the change is over with that write.
        let Step::Finished(Some(last)) = run.next(t(1), &|i| i == 4) else {
            panic!("not finished");
        };
        let kept = last.progress.unwrap().unwrap();
        assert!(kept.is_finished() && kept.handlers["o"].state == State::Skipped);
        assert!(!run.holds_finalizer() && last.base.is_none());
        let mut run = ChangeRun::start(Resume, &set, None, &observed, t(0));
        run.next(t(0), &|_| true);
        let write = run.complete(6, Outcome::Ignored, t(1));
        assert_eq!(write, Some(ChangeWrite::default()));
        assert_eq!(run.next(t(1), &|_| true), Step::Finished(None));
    }

    #[test]
    fn stored_changes_resume_and_conflicts_merge() {
        let set = set();
        let new = body("x", 1);
        let mut run = ChangeRun::start(Create, &set, None, &seen(&set, &new), t(0));
        run.next(t(0), &|_| true);
        let write = run.complete(0, Outcome::Succeeded, t(1)).unwrap();
        let mut stored = write.progress.unwrap().unwrap();
        stored.handlers.insert("gone".to_owned(), Record::PENDING);
        let mut again = ChangeRun::resume(stored.clone(), &set);
        assert!(!again.progress().handlers.contains_key("gone"));
        assert!(matches!(
            again.next(t(2), &|_| true),
            Step::Run { index: 1, .. }
        ));
        // Another replica finished b meanwhile: absorbed; a delete wins over this change.
        stored.handlers.get_mut("b").unwrap().state = State::Done;
        assert!(again.absorb(&stored));
        assert_eq!(again.progress().handlers["b"].state, State::Done);
        let write = again
            .complete(1, Outcome::Failed { message: "late" }, t(3))
            .unwrap();
        assert!(
            write.writes_base(),
            "done stays done, and the change is over"
        );
        let mut fresh = ChangeRun::start(Create, &set, None, &seen(&set, &new), t(0));
        let delete = Progress {
            cause: Delete,
            ..fresh.progress().clone()
        };
        assert!(!fresh.absorb(&delete));
    }
}
