//! Test helpers for the supervisor: hand-written `ErasedHandler`s built from closures, a log of
//! calls at paused-time instants, object builders, and a harness that timestamps effects.
//!
//! Blocking handlers and paused time: tokio auto-advances a paused clock whenever the runtime
//! is idle, and it cannot see `std::thread`s. So a blocking body either
//! - is *quick* ([`H::run_quick`]): it never waits for a later paused-time event; the test
//!   handler holds tokio's auto-advance (through a `spawn_blocking` guard released when the
//!   dedicated thread exits, after it delivered its result), so no paused time passes while
//!   it runs; or
//! - *waits for the stop flag* ([`H::run_blocking`]): the test must be awake at the instant
//!   the flag is set and [`Harness::settle`] until the thread has reacted.
#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used
)]

mod capture;
mod handler;
mod harness;
mod log;

pub use capture::*;
pub use handler::*;
pub use harness::*;
pub use log::*;

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use kopf_runtime::engine::{
    Call, Effect, ErasedHandler, HandlerKind, HandlerSpec, Invocation, MatchError, ObjectState,
    Output, Services, Stats, Supervisor, SupervisorConfig,
};
use kopf_runtime::{HandlerError, Stopper};
use serde_json::{Value, json};
use tokio::time::Instant;

pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

pub fn ok() -> Result<Output, HandlerError> {
    Ok(Output::default())
}

pub fn ok_result(value: Value) -> Result<Output, HandlerError> {
    Ok(Output {
        result: Some(value),
        patch: None,
    })
}
