//! Stage 2: from what was written to what a handler is. Checks every option on its own, against
//! the others and against the function's signature, and builds the [`HandlerModel`]; all errors
//! are reported together, each on its token. One file per concern:
//!
//! ```text
//!   mod.rs (model: runs the checks, assembles the model)
//!     ├── kinds.rs     which options each kind takes; the finalizer per kind
//!     ├── common.rs    id, durations, retries, errors, initial_delay, crate
//!     ├── resource.rs  the object type, or group/version/plural/kind
//!     ├── filters.rs   labels(...), annotations(...), field/value
//!     ├── timer.rs     the schedule, slack ──▶ cron.rs (cron, tz, missed)
//!     │                  └──▶ cron_fields.rs (which field is wrong, and why)
//!     ├── change.rs    the change handlers: the watched field, Old/Diff/FieldChange
//!     ├── reconcile.rs `#[reconcile]`: owns, watches, backoff_max, debounce, cleanup, returns
//!     ├── admission.rs `#[validate]`, `#[mutate]` ──▶ connect.rs (`connect`, subresources)
//!     └── error.rs     err: a message on a token (used by all of the above)
//! ```
//!
//! It reads the parsed stage ([`crate::args`], [`crate::signature`]) and writes
//! [`crate::model`]; none of them imports it.

pub(crate) mod admission;
mod change;
mod common;
mod connect;
mod cron;
mod cron_fields;
mod error;
mod filters;
pub(crate) mod index;
mod kinds;
mod reconcile;
mod resource;
mod timer;

use proc_macro2::Span;

pub(crate) use kinds::refused_option;

use crate::args::RawArgs;
use crate::kind::Kind;
use crate::model::{Field, Function, HandlerModel, MetaFilter, Reconcile, Resource, Schedule};
use crate::signature::Signature;

/// What the checks that produce a value produced.
struct Checked {
    id: String,
    resource: Resource,
    schedule: Schedule,
    labels: Vec<(String, MetaFilter)>,
    annotations: Vec<(String, MetaFilter)>,
    field: Option<Field>,
    reconcile: Option<Reconcile>,
}

/// Runs every check; all errors together.
fn check(kind: Kind, args: &RawArgs, sig: &Signature, attr: Span) -> darling::Result<Checked> {
    let mut errors = darling::Error::accumulator();
    let id = errors.handle(common::id(args.id.as_ref(), &sig.ident));
    let resource = errors.handle(resource::resource(args, sig));
    let schedule = errors.handle(timer::schedule(kind, args, attr));
    let labels = errors.handle(filters::meta_filters(args.labels.as_ref(), true));
    let annotations = errors.handle(filters::meta_filters(args.annotations.as_ref(), false));
    let field = errors.handle(filters::field(args.field.as_ref(), args.value.as_ref()));
    let reconcile = errors.handle(reconcile::reconcile(kind, args, sig));
    errors.handle(change::params(kind, sig, args.field.is_some()));
    errors.handle(common::durations(args));
    errors.handle(timer::slack(kind, args));
    errors.handle(common::retries(args.retries.as_ref()));
    errors.finish()?;
    let (
        Some(id),
        Some(resource),
        Some(schedule),
        Some(labels),
        Some(annotations),
        Some(field),
        Some(reconcile),
    ) = (
        id,
        resource,
        schedule,
        labels,
        annotations,
        field,
        reconcile,
    )
    else {
        // Each check either succeeded or pushed an error, so this is not reached.
        return Err(darling::Error::custom(
            "kopf-macros: internal validation error",
        ));
    };
    Ok(Checked {
        id,
        resource,
        schedule,
        labels,
        annotations,
        field,
        reconcile,
    })
}

/// Validates the options against each other and the signature, and builds the model; all
/// errors together. `attr_span` is where "missing option" errors point (the attribute).
pub(crate) fn model(
    kind: Kind,
    args: RawArgs,
    sig: Signature,
    attr_span: Span,
) -> darling::Result<HandlerModel> {
    let checked = check(kind, &args, &sig, attr_span)?;
    let (field, watch) = change::watch(kind, checked.field, args.value.is_some(), &sig);
    Ok(HandlerModel {
        kind,
        krate: common::krate(args.krate),
        id: checked.id,
        function: Function {
            ident: sig.ident,
            is_async: sig.is_async,
            params: sig.params,
            output: sig.output,
        },
        resource: checked.resource,
        errors: common::errors_mode(args.errors.as_ref()),
        backoff: args.backoff.map(|d| d.value),
        retries: args.retries.map(|r| *r),
        retry_timeout: args.retry_timeout.map(|d| d.value),
        timeout: args.timeout.map(|d| d.value),
        initial_delay: args.initial_delay.map(common::delay),
        finalizer: kinds::finalizer(
            kind,
            args.finalizer.as_ref(),
            args.optional.as_ref(),
            args.cleanup.is_some(),
        ),
        cancellation_backoff: args.cancellation_backoff.map(|d| d.value),
        cancellation_timeout: args.cancellation_timeout.map(|d| d.value),
        cancellation_polling: args.cancellation_polling.map(|d| d.value),
        slack: args.slack.map(|d| d.value),
        schedule: checked.schedule,
        labels: checked.labels,
        annotations: checked.annotations,
        field,
        watch,
        when: args.when.map(|w| w.0),
        reconcile: checked.reconcile,
    })
}
