//! Where a handler's output goes: the one rule for every kind of handler. Its result is stored
//! under `status.<handler id>`, merged into its own merge patch of the object:
//!
//! ```text
//!   result 3, patch {"spec": {"a": 1}}  ──>  {"spec": {"a": 1}, "status": {"<id>": 3}}
//!   result 3, patch {"status": "x"}     ──>  {"status": {"<id>": 3}}  (a non-object is replaced)
//!   result 3, patch [1]                 ──>  {"status": {"<id>": 3}}  and [1] is rejected
//! ```
//!
//! Daemons and timers (through the operator's patch writer), change handlers (in the step their
//! change writes) and the testing kit's world all build their patches here.

use serde_json::{Map, Value};

/// The merge patch of one output of the handler `handler`: its `patch` with its `result` under
/// `status.<handler>`, and the patch if it had to be left out for not being a JSON object (the
/// result is still stored).
#[must_use]
pub(crate) fn output_patch(
    handler: &str,
    result: Option<Value>,
    patch: Option<Value>,
) -> (Map<String, Value>, Option<Value>) {
    let (mut merged, rejected) = match patch {
        Some(Value::Object(map)) => (map, None),
        Some(other) => (Map::new(), Some(other)),
        None => (Map::new(), None),
    };
    if let Some(result) = result {
        put_result(&mut merged, handler, result);
    }
    (merged, rejected)
}

/// Puts `result` under `status.<handler>` in the merge patch `patch` (its `status`, if not an
/// object, is replaced).
pub(crate) fn put_result(patch: &mut Map<String, Value>, handler: &str, result: Value) {
    let status = patch
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    if let Value::Object(status) = status {
        status.insert(handler.to_owned(), result);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn results_go_under_status_and_a_patch_that_is_not_an_object_is_refused() {
        let table = [
            // result, patch, merged, rejected
            (None, None, json!({}), None),
            (Some(json!(3)), None, json!({"status": {"t": 3}}), None),
            (
                Some(json!(3)),
                Some(json!({"spec": {"a": 1}, "status": {"other": 1}})),
                json!({"spec": {"a": 1}, "status": {"other": 1, "t": 3}}),
                None,
            ),
            (None, Some(json!({"spec": 1})), json!({"spec": 1}), None),
            (None, Some(json!([1])), json!({}), Some(json!([1]))),
            (
                Some(json!(2)),
                Some(json!("bad")),
                json!({"status": {"t": 2}}),
                Some(json!("bad")),
            ),
            (
                Some(json!(1)),
                Some(json!({"status": "x"})),
                json!({"status": {"t": 1}}),
                None,
            ),
        ];
        for (result, patch, merged, rejected) in table {
            let shown = format!("{result:?} {patch:?}");
            assert_eq!(
                output_patch("t", result, patch),
                (map(merged), rejected),
                "{shown}"
            );
        }
    }
}
