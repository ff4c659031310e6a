//! One invocation's work in flight (an async handler's future, or a blocking handler's
//! thread) and how it ended; `attempt_future` starts it and `invoke` drives it.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::{BoxFuture, CatchUnwind};
use tokio_util::sync::CancellationToken;

use super::blocking::Thread;
use super::meter::InvocationResult;
use crate::core::call::Output;
use crate::core::outcome::HandlerError;

pub(crate) type Outcome = Result<Output, HandlerError>;

/// An invocation's work as it starts, or its failure to start with how it is counted.
pub(crate) type Started = Result<Work, (HandlerError, InvocationResult)>;

/// An invocation's work being started: at once (an async handler, or a failed call), or once
/// a dedicated thread is started.
pub(crate) enum Starting<'a> {
    Ready(Started),
    Thread(Pin<Box<dyn Future<Output = Started> + Send + 'a>>),
}

/// An invocation in flight.
pub(crate) enum Work {
    Async(CatchUnwind<AssertUnwindSafe<BoxFuture<'static, Outcome>>>),
    Thread(Thread<Outcome>),
}

impl Work {
    /// Polls the handler's end; a panic becomes its message.
    pub(crate) fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Result<Outcome, String>> {
        match self {
            Self::Async(fut) => Pin::new(fut).poll(cx).map_err(|p| panic_message(&p)),
            Self::Thread(thread) => Pin::new(&mut thread.result).poll(cx).map(|r| match r {
                Ok(result) => result.map_err(|p| panic_message(&p)),
                Err(_) => Err("the handler's thread ended without a result".to_owned()),
            }),
        }
    }
}

/// A failure to start an invocation, with how it is counted.
pub(crate) fn failed(err: HandlerError) -> (HandlerError, InvocationResult) {
    let result = InvocationResult::of_error(&err);
    (err, result)
}

/// How the driver left an invocation.
pub(crate) enum Ended {
    Returned(Outcome),
    /// The handler panicked (with this message).
    Panicked(String),
    Cancelled,
    Abandoned,
}

/// How a driven invocation ended: how, whether it ran past its timeout, and the end of its
/// thread when it was a blocking handler's (an abandoned one may run on).
pub(crate) struct Driven {
    pub(crate) ended: Ended,
    pub(crate) timed_out: bool,
    pub(crate) thread_ended: Option<CancellationToken>,
}

/// The message of a caught panic.
pub(crate) fn panic_message(payload: &Box<dyn Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}
