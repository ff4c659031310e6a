//! The checks of `#[reconcile]`: its own options (`owns`, `watches`, `backoff_max`,
//! `debounce`, `cleanup`) against each other, and that the function returns an action.

use std::time::Duration;

use super::error::err;
use crate::args::RawArgs;
use crate::kind::Kind;
use crate::model::Reconcile;
use crate::signature::Signature;

/// The first backoff of a reconcile handler that sets none (the runtime's
/// `ReconcileOptions::DEFAULT_BACKOFF`).
const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);

/// `#[reconcile]`'s options, checked (`None` for the other kinds, whose use of them was
/// already reported by name).
pub(crate) fn reconcile(
    kind: Kind,
    args: &RawArgs,
    sig: &Signature,
) -> darling::Result<Option<Reconcile>> {
    if kind != Kind::Reconcile {
        return Ok(None);
    }
    let mut errors = darling::Error::accumulator();
    if sig.output.is_none() {
        errors.push(err(
            format!(
                "a `#[reconcile]` handler returns what to do next: declare `-> Result<Action, \
                 HandlerError>` (or `-> Action`) on `{}` and return \
                 `Ok(Action::requeue(delay))` or `Ok(Action::await_change())`",
                sig.ident
            ),
            sig.ident.span(),
        ));
    }
    for (name, value) in [
        ("debounce", args.debounce),
        ("backoff_max", args.backoff_max),
    ] {
        if let Some(d) = value.filter(|d| d.value.is_zero()) {
            let hint = if name == "debounce" {
                " (leave it out to run at once)"
            } else {
                ""
            };
            errors.push(err(
                format!("`{name}` must be longer than zero{hint}"),
                d.span,
            ));
        }
    }
    let backoff = args.backoff.map_or(DEFAULT_BACKOFF, |b| b.value);
    if let Some(max) = args
        .backoff_max
        .filter(|m| m.value < backoff && !m.value.is_zero())
    {
        let what = if args.backoff.is_some() {
            format!("`backoff` ({backoff:?})")
        } else {
            format!("the default `backoff` ({backoff:?})")
        };
        errors.push(err(
            format!(
                "`backoff_max` ({:?}) is shorter than {what}: the backoff starts at `backoff` and \
                 doubles up to `backoff_max`",
                max.value
            ),
            max.span,
        ));
    }
    errors.finish()?;
    Ok(Some(Reconcile {
        owns: args.owns.as_ref().map(|o| o.0.clone()).unwrap_or_default(),
        watches: args
            .watches
            .as_ref()
            .map(|w| w.0.clone())
            .unwrap_or_default(),
        backoff_max: args.backoff_max.map(|d| d.value),
        debounce: args.debounce.map(|d| d.value),
        cleanup: args.cleanup.as_ref().map(|c| c.0.clone()),
    }))
}
