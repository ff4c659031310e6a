//! What a reconcile handler returns: [`Action`], when to run again if nothing changes. A leaf.
//!
//! Across the type-erased boundary (an [`Output`](crate::engine::Output) of
//! [`ErasedHandler::invoke`](crate::engine::ErasedHandler::invoke)) the action travels as the
//! output's `result`, encoded by [`Action::to_result`] and read back by [`Action::from_result`]:
//! a reconcile handler's result is its action, never stored on the object.

use std::time::Duration;

use serde_json::Value;

/// The key of the requeue delay, in milliseconds, in an encoded action.
const REQUEUE_MS: &str = "requeueAfterMs";

/// What a reconcile handler asks for after a successful run: run again after a delay even if
/// nothing changes ([`Action::requeue`]), or only when something changes
/// ([`Action::await_change`]).
///
/// ```
/// use std::time::Duration;
/// use kopf_runtime::Action;
///
/// let again = Action::requeue(Duration::from_secs(300));
/// assert_eq!(again.requeue_after, Some(Duration::from_secs(300)));
/// assert_eq!(Action::await_change().requeue_after, None);
/// assert_eq!(Action::default(), Action::await_change());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Action {
    /// Run again this long after the run ended, unless a trigger runs it sooner (`None`: wait
    /// for a change).
    pub requeue_after: Option<Duration>,
}

impl Action {
    /// Run again after `delay`, even if nothing changes (a trigger before runs it sooner).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let action = kopf_runtime::Action::requeue(Duration::from_secs(60));
    /// assert!(action.requeue_after.is_some());
    /// ```
    #[must_use]
    pub const fn requeue(delay: Duration) -> Self {
        Self {
            requeue_after: Some(delay),
        }
    }

    /// Run again only when something changes: the object's essence, an owned child, a related
    /// object, or an explicit trigger.
    ///
    /// ```
    /// assert_eq!(kopf_runtime::Action::await_change().requeue_after, None);
    /// ```
    #[must_use]
    pub const fn await_change() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// The action as a reconcile handler's `Output::result` (what a hand-written
    /// [`ErasedHandler`](crate::engine::ErasedHandler) of kind `Reconcile` returns).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use kopf_runtime::Action;
    /// let action = Action::requeue(Duration::from_millis(1500));
    /// assert_eq!(Action::from_result(action.to_result().as_ref()), action);
    /// assert_eq!(Action::await_change().to_result(), None);
    /// ```
    #[must_use]
    pub fn to_result(self) -> Option<Value> {
        let delay = self.requeue_after?;
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        Some(serde_json::json!({ REQUEUE_MS: ms }))
    }

    /// Reads an action back from a reconcile handler's `Output::result`: anything else than
    /// what [`Action::to_result`] makes is [`Action::await_change`].
    ///
    /// ```
    /// use kopf_runtime::Action;
    /// assert_eq!(Action::from_result(None), Action::await_change());
    /// assert_eq!(Action::from_result(Some(&serde_json::json!("x"))), Action::await_change());
    /// ```
    #[must_use]
    pub fn from_result(result: Option<&Value>) -> Self {
        let ms = result
            .and_then(|v| v.get(REQUEUE_MS))
            .and_then(Value::as_u64);
        Self {
            requeue_after: ms.map(Duration::from_millis),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_survive_the_erased_boundary() {
        for action in [
            Action::await_change(),
            Action::requeue(Duration::ZERO),
            Action::requeue(Duration::from_millis(1)),
            Action::requeue(Duration::from_secs(86_400)),
        ] {
            assert_eq!(Action::from_result(action.to_result().as_ref()), action);
        }
        let huge = Action::requeue(Duration::MAX);
        let back = Action::from_result(huge.to_result().as_ref());
        assert!(
            back.requeue_after
                .is_some_and(|d| d >= Duration::from_secs(1 << 40))
        );
    }
}
