//! The real operator in a test, against a real cluster: started with its problems surfaced at
//! once, its handlers' outcomes as a stream to wait on, and a clean stop.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::broadcast;

use crate::core::effects::Effect;
use crate::core::object::ObjectRef;
use crate::operator::{Operator, OperatorBuilder, OperatorError, WatchPhase};

/// How long [`LiveOperator::start`] waits for the operator to be ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(5);

/// What a handler did, as the operator saw it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// A run succeeded; `result` is what it stored under `status.<handler>`, if anything.
    Succeeded {
        /// The object.
        object: ObjectRef,
        /// The handler id.
        handler: &'static str,
        /// The result.
        result: Option<Value>,
    },
    /// A run failed; `fatal` when no retry follows.
    Failed {
        /// The object.
        object: ObjectRef,
        /// The handler id.
        handler: &'static str,
        /// The error with its causes.
        message: String,
        /// No retry follows.
        fatal: bool,
    },
}

impl Outcome {
    /// The handler's id.
    #[must_use]
    pub fn handler(&self) -> &'static str {
        match self {
            Self::Succeeded { handler, .. } | Self::Failed { handler, .. } => handler,
        }
    }

    /// The object's name.
    #[must_use]
    pub fn name(&self) -> &str {
        match self {
            Self::Succeeded { object, .. } | Self::Failed { object, .. } => &object.name,
        }
    }

    fn of(effect: Effect) -> Option<Self> {
        match effect {
            Effect::Output {
                object,
                handler,
                result,
                ..
            } => Some(Self::Succeeded {
                object,
                handler,
                result,
            }),
            Effect::Failure {
                object,
                handler,
                message,
                fatal,
                ..
            } => Some(Self::Failed {
                object,
                handler,
                message,
                fatal,
            }),
            Effect::Finalizer { .. } | Effect::Skipped { .. } => None,
        }
    }
}

/// Why a [`LiveOperator`] did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The operator could not be built (configuration, client, registry, probe address).
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// A resource kind is not installed or not permitted (see the operator's log for the cause).
    #[error(
        "the resource {0} is unavailable: its CRD is not installed, or listing it is forbidden"
    )]
    Unavailable(String),
    /// The operator was not ready in time.
    #[error("the operator was not ready within {0:?}: its watches did not finish listing")]
    NotReady(Duration),
}

/// A running operator for a test (see [`LiveOperator::start`]).
#[derive(Debug)]
pub struct LiveOperator {
    operator: Operator,
    outcomes: broadcast::Receiver<Effect>,
}

impl LiveOperator {
    /// Starts the operator `builder` describes and waits until every resource kind has listed
    /// its objects, at most [`START_TIMEOUT`]: a problem (a bad configuration, a missing CRD, a
    /// forbidden list) is an error at once, not a test that hangs.
    ///
    /// # Errors
    /// [`StartError`]: the operator's own error, an unavailable kind, or not ready in time (the
    /// operator is stopped then).
    ///
    /// # Cancellation safety
    /// Not cancel safe: dropping the future may leave the operator running.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kopf_runtime::testing::StartError> {
    /// use kopf_runtime::testing::LiveOperator;
    /// let mut operator = LiveOperator::start(kopf_runtime::Operator::builder()).await?;
    /// let first = operator.wait_for(std::time::Duration::from_secs(30), |_| true).await;
    /// operator.stop().await;
    /// # let _ = first; Ok(()) }
    /// # let _ = demo;
    /// ```
    pub async fn start(builder: OperatorBuilder) -> Result<Self, StartError> {
        let (sender, outcomes) = broadcast::channel(4096);
        let operator = builder.outcomes(sender).start().await?;
        let ready = tokio::time::timeout(START_TIMEOUT, async {
            loop {
                let kinds = operator.stats().kinds;
                if let Some(kind) = kinds.iter().find(|k| k.phase == WatchPhase::Unavailable) {
                    return Err(StartError::Unavailable(kind.resource.to_string()));
                }
                if kinds.iter().all(|k| k.phase == WatchPhase::Watching) {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        match ready {
            Ok(Ok(())) => Ok(Self { operator, outcomes }),
            Ok(Err(err)) => {
                operator.shutdown().await;
                Err(err)
            }
            Err(_) => {
                operator.shutdown().await;
                Err(StartError::NotReady(START_TIMEOUT))
            }
        }
    }

    /// Waits for the next outcome that `matches`, at most `timeout` (`None`: none came).
    ///
    /// # Cancellation safety
    /// Cancel-safe: an outcome seen before the future is dropped is consumed.
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        matches: impl Fn(&Outcome) -> bool,
    ) -> Option<Outcome> {
        let found = tokio::time::timeout(timeout, async {
            loop {
                match self.outcomes.recv().await {
                    Ok(effect) => {
                        if let Some(outcome) = Outcome::of(effect).filter(|o| matches(o)) {
                            return Some(outcome);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "a test fell behind the operator's outcomes");
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .await;
        found.ok().flatten()
    }

    /// The operator, for its stats and probes.
    #[must_use]
    pub fn operator(&self) -> &Operator {
        &self.operator
    }

    /// Stops the operator as on SIGTERM (every handler through its stop ladder).
    ///
    /// # Cancellation safety
    /// Not cancel safe: dropping the future leaves the operator partly stopped.
    pub async fn stop(self) {
        self.operator.shutdown().await;
    }
}
