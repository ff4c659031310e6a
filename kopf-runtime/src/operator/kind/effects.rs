//! What the operator does for each effect the supervisor reports: a plan, made without doing
//! anything, so that it is tested as a table.
//!
//! | effect | plan |
//! |---|---|
//! | `Finalizer` (hold or release) | queue a finalizer sync for the object |
//! | `Output` with a result or an object patch | queue the merge patch (results under `status.<handler>`) |
//! | `Output` with a patch that is not a JSON object | log an error; queue the result alone, if any |
//! | `Output` with neither | nothing |
//! | `Failure` | a `HandlerFailed` Warning Event ("failed and will be retried" / "failed permanently") |
//! | `Skipped` | a warning in the log and an `ObjectSkipped` Warning Event |

use std::sync::Arc;

use tracing::{error, warn};

use super::queue::Job;
use crate::core::effects::Effect;
use crate::core::object::ObjectRef;
use crate::core::resource::ResourceInfo;
use crate::core::result_patch::output_patch;
use crate::operator::events::WarningNote;

/// What to do for one effect.
#[derive(Debug, PartialEq)]
pub(crate) enum Plan {
    /// Queue a job for the object.
    Queue(Arc<str>, Job),
    /// Post a Warning Event about the object.
    Warn {
        object: ObjectRef,
        reason: &'static str,
        action: &'static str,
        note: WarningNote,
    },
    /// Nothing.
    Nothing,
}

/// The plan for `effect` (logging what goes only to the log).
pub(crate) fn plan(resource: &ResourceInfo, effect: Effect) -> Plan {
    match effect {
        Effect::Finalizer { object, .. } => Plan::Queue(object.uid, Job::Sync),
        Effect::Output {
            object,
            handler,
            result,
            patch,
        } => {
            let (patch, rejected) = output_patch(handler, result, patch);
            if let Some(other) = rejected {
                error!(resource = %resource, object = %object, handler,
                    "ignoring a patch that is not a JSON object: {other}");
            }
            if patch.is_empty() {
                return Plan::Nothing;
            }
            let uid = object.uid.clone();
            let job = Job::Output {
                object,
                handler,
                patch,
                outputs: 1,
            };
            Plan::Queue(uid, job)
        }
        Effect::Failure {
            object,
            handler,
            message,
            summary,
            fatal,
        } => {
            let what = if fatal {
                format!("handler `{handler}` failed permanently")
            } else {
                format!("handler `{handler}` failed and will be retried")
            };
            let note = WarningNote {
                what,
                summary,
                message,
            };
            Plan::Warn {
                object,
                reason: "HandlerFailed",
                action: handler,
                note,
            }
        }
        Effect::Skipped {
            object,
            handler,
            message,
            summary,
        } => {
            warn!(resource = %resource, object = %object, uid = %object.uid, handler, error = %message,
                "skipping the object for this handler");
            let note = WarningNote {
                what: format!("handler `{handler}` skipped the object"),
                summary,
                message,
            };
            Plan::Warn {
                object,
                reason: "ObjectSkipped",
                action: handler,
                note,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};

    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("a test patch is an object"),
        }
    }

    fn object() -> ObjectRef {
        ObjectRef {
            uid: Arc::from("u1"),
            namespace: Some(Arc::from("ns")),
            name: Arc::from("a"),
        }
    }

    fn output(result: Option<Value>, patch: Option<Value>) -> Effect {
        Effect::Output {
            object: object(),
            handler: "h",
            result,
            patch,
        }
    }

    fn queued(patch: Value) -> Plan {
        Plan::Queue(
            Arc::from("u1"),
            Job::Output {
                object: object(),
                handler: "h",
                patch: map(patch),
                outputs: 1,
            },
        )
    }

    fn warned(reason: &'static str, what: &str) -> Plan {
        Plan::Warn {
            object: object(),
            reason,
            action: "h",
            note: WarningNote {
                what: what.to_owned(),
                summary: "s".to_owned(),
                message: "m".to_owned(),
            },
        }
    }

    #[test]
    fn each_effect_has_its_plan() {
        let failure = |fatal| Effect::Failure {
            object: object(),
            handler: "h",
            message: "m".into(),
            summary: "s".into(),
            fatal,
        };
        let table = [
            (
                Effect::Finalizer {
                    object: object(),
                    hold: true,
                },
                Plan::Queue(Arc::from("u1"), Job::Sync),
            ),
            (
                output(Some(json!(1)), Some(json!({"spec": {"a": 2}}))),
                queued(json!({"spec": {"a": 2}, "status": {"h": 1}})),
            ),
            (
                output(Some(json!(1)), Some(json!([1]))),
                queued(json!({"status": {"h": 1}})),
            ),
            (output(None, Some(json!("x"))), Plan::Nothing),
            (output(None, None), Plan::Nothing),
            (
                failure(false),
                warned("HandlerFailed", "handler `h` failed and will be retried"),
            ),
            (
                failure(true),
                warned("HandlerFailed", "handler `h` failed permanently"),
            ),
            (
                Effect::Skipped {
                    object: object(),
                    handler: "h",
                    message: "m".into(),
                    summary: "s".into(),
                },
                warned("ObjectSkipped", "handler `h` skipped the object"),
            ),
        ];
        let resource = ResourceInfo::new("", "v1", "ConfigMap", "configmaps", true);
        for (effect, want) in table {
            let shown = format!("{effect:?}");
            assert_eq!(plan(&resource, effect), want, "{shown}");
        }
    }
}
