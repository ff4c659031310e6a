//! The jobs queued for one object, and how a new job joins the queue.
//!
//! A finalizer sync goes first (one is enough: it reads the latest state when it runs). Handler
//! outputs (results and patches) are JSON merge patches; a new one is merged into the output
//! still waiting at the tail of the queue when the two compose exactly, so an object whose
//! timers produce results faster than the API server takes writes keeps one pending write with
//! the latest values, not a backlog that grows without bound.

use std::collections::VecDeque;

use serde_json::{Map, Value};

use crate::core::object::ObjectRef;

/// One unit of work for an object.
#[derive(Debug)]
pub(crate) enum Job {
    /// Make the finalizer match what the supervisor needs.
    Sync,
    /// Apply handler outputs: `status.<handler>` results and handlers' own patches, as one
    /// merge patch.
    Output {
        object: ObjectRef,
        /// The handler of the latest output merged in (for messages).
        handler: &'static str,
        patch: Map<String, Value>,
        /// How many outputs this job carries.
        outputs: u32,
    },
}

/// The merge patch of one output: the handler's patch with its result under
/// `status.<handler>`, and the handler's patch if it had to be left out for not being a JSON
/// object (the result is still stored).
pub(crate) fn output_patch(
    handler: &'static str,
    result: Option<Value>,
    patch: Option<Value>,
) -> (Map<String, Value>, Option<Value>) {
    let (mut merged, rejected) = match patch {
        Some(Value::Object(map)) => (map, None),
        Some(other) => (Map::new(), Some(other)),
        None => (Map::new(), None),
    };
    if let Some(result) = result {
        let status = merged
            .entry("status")
            .or_insert_with(|| Value::Object(Map::new()));
        match status {
            Value::Object(status) => {
                status.insert(handler.to_owned(), result);
            }
            _ => *status = serde_json::json!({ handler: result }),
        }
    }
    (merged, rejected)
}

/// Adds `job` to an object's queue (see the module docs).
pub(crate) fn push(queue: &mut VecDeque<Job>, job: Job) {
    match job {
        Job::Sync if matches!(queue.front(), Some(Job::Sync)) => {}
        Job::Sync => queue.push_front(job),
        Job::Output {
            object,
            handler,
            patch,
            outputs,
        } => {
            if let Some(Job::Output {
                handler: last_handler,
                patch: last,
                outputs: last_outputs,
                ..
            }) = queue.back_mut()
                && let Some(composed) = compose(last, &patch)
            {
                *last = composed;
                *last_handler = handler;
                *last_outputs += outputs;
                return;
            }
            queue.push_back(Job::Output {
                object,
                handler,
                patch,
                outputs,
            });
        }
    }
}

/// One merge patch with the effect of applying `first`, then `second` — `None` when no single
/// merge patch has it (where `second` sets an object on a field that `first` deleted or set to
/// a non-object: the object would be merged into the target's old value instead of replacing
/// it).
pub(crate) fn compose(
    first: &Map<String, Value>,
    second: &Map<String, Value>,
) -> Option<Map<String, Value>> {
    let mut out = first.clone();
    for (key, value) in second {
        let merged = match (out.get(key), value) {
            (Some(Value::Object(a)), Value::Object(b)) => Value::Object(compose(a, b)?),
            (Some(_), Value::Object(_)) => return None,
            _ => value.clone(),
        };
        out.insert(key.clone(), merged);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("a test patch is an object"),
        }
    }

    /// RFC 7386 applied to a target, to check composition against sequential application.
    fn apply(target: &Value, patch: &Value) -> Value {
        let Value::Object(patch) = patch else {
            return patch.clone();
        };
        let mut out = match target {
            Value::Object(t) => t.clone(),
            _ => Map::new(),
        };
        for (k, v) in patch {
            if v.is_null() {
                out.remove(k);
            } else {
                let next = apply(out.get(k).unwrap_or(&Value::Null), v);
                out.insert(k.clone(), next);
            }
        }
        Value::Object(out)
    }

    fn output(handler: &'static str, result: Value) -> Job {
        Job::Output {
            object: ObjectRef {
                uid: Arc::from("u1"),
                namespace: Some(Arc::from("ns")),
                name: Arc::from("a"),
            },
            handler,
            patch: output_patch(handler, Some(result), None).0,
            outputs: 1,
        }
    }

    #[test]
    fn composing_equals_applying_in_turn_where_it_is_exact() {
        let target = json!({"spec": {"a": 1, "b": {"c": 2, "d": 3}}, "status": {"x": "old"}});
        let cases = [
            (json!({"status": {"x": 1}}), json!({"status": {"x": 2}})),
            (json!({"spec": {"a": null}}), json!({"spec": {"a": 5}})),
            (
                json!({"spec": {"b": {"c": 9}}}),
                json!({"spec": {"b": {"d": null}}}),
            ),
            (
                json!({"spec": {"a": 7}}),
                json!({"metadata": {"labels": {"k": "v"}}}),
            ),
            (
                json!({"spec": {"b": {"c": null}}}),
                json!({"spec": {"b": {"c": 4}}}),
            ),
        ];
        for (a, b) in cases {
            let composed = compose(&map(a.clone()), &map(b.clone())).expect("exact");
            assert_eq!(
                apply(&target, &Value::Object(composed)),
                apply(&apply(&target, &a), &b),
                "{a} then {b}"
            );
        }
    }

    #[test]
    fn an_object_over_a_deleted_or_scalar_field_does_not_compose() {
        let set_obj = map(json!({"spec": {"b": {"c": 1}}}));
        assert!(compose(&map(json!({"spec": {"b": null}})), &set_obj).is_none());
        assert!(compose(&map(json!({"spec": {"b": 3}})), &set_obj).is_none());
        assert!(compose(&map(json!({"spec": {}})), &set_obj).is_some());
    }

    #[test]
    fn outputs_merge_into_the_waiting_one_and_a_sync_goes_first_once() {
        let mut queue = VecDeque::new();
        for i in 0..1000 {
            push(&mut queue, output("tick", json!({ "at": i })));
        }
        push(&mut queue, output("other", json!("ok")));
        push(&mut queue, Job::Sync);
        push(&mut queue, Job::Sync);
        assert_eq!(queue.len(), 2, "{queue:?}");
        assert!(matches!(queue.front(), Some(Job::Sync)));
        let Some(Job::Output {
            patch,
            outputs,
            handler,
            ..
        }) = queue.back()
        else {
            unreachable!("the output is queued");
        };
        assert_eq!(*outputs, 1001);
        assert_eq!(*handler, "other");
        assert_eq!(
            Value::Object(patch.clone()),
            json!({"status": {"tick": {"at": 999}, "other": "ok"}})
        );
    }

    #[test]
    fn an_output_that_does_not_compose_is_queued_after_the_waiting_one() {
        let mut queue = VecDeque::new();
        push(&mut queue, output("t", json!(3)));
        push(&mut queue, output("t", json!({"now": "an object"})));
        assert_eq!(queue.len(), 2);
    }

    #[test]
    fn a_patch_that_is_not_an_object_is_refused_and_the_result_kept() {
        assert_eq!(
            output_patch("t", None, Some(json!([1]))),
            (Map::new(), Some(json!([1])))
        );
        assert_eq!(
            output_patch("t", Some(json!(2)), Some(json!("bad"))),
            (map(json!({"status": {"t": 2}})), Some(json!("bad")))
        );
        assert_eq!(
            output_patch("t", Some(json!(1)), Some(json!({"status": "x"}))),
            (map(json!({"status": {"t": 1}})), None)
        );
    }
}
