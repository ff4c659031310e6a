//! The options every kind of handler shares: the id, the durations, `retries`, and the values
//! passed on with their defaults (`errors`, `initial_delay`, `crate`).

use darling::util::SpannedValue;
use syn::{GenericArgument, Ident, PathArguments, Type};

use super::error::err;
use crate::args::{CratePath, DelayArg, DurationArg, ErrorsArg, RawArgs};
use crate::model::{Delay, ErrorsMode};

/// The handler id: explicit, or the function's name.
pub(crate) fn id(
    explicit: Option<&SpannedValue<String>>,
    ident: &Ident,
) -> darling::Result<String> {
    let Some(id) = explicit else {
        let name = ident.to_string();
        return Ok(name.strip_prefix("r#").unwrap_or(&name).to_owned());
    };
    let ok = !id.is_empty()
        && id.len() <= 253
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok((**id).clone())
    } else {
        Err(err(
            format!(
                "invalid handler id \"{}\": use 1 to 253 ASCII letters, digits, `_`, `-` or `.` \
                 (the id is the key of the handler's result under `status`)",
                id.as_str()
            ),
            id.span(),
        ))
    }
}

/// Durations that cannot be zero.
pub(crate) fn durations(args: &RawArgs) -> darling::Result<()> {
    let positive: [(&str, Option<DurationArg>); 7] = [
        ("interval", args.interval),
        ("idle", args.idle),
        ("jitter", args.jitter),
        ("timeout", args.timeout),
        ("retry_timeout", args.retry_timeout),
        ("cancellation_polling", args.cancellation_polling),
        ("slack", args.slack),
    ];
    let mut errors = darling::Error::accumulator();
    for (name, value) in positive {
        if let Some(d) = value.filter(|d| d.value.is_zero()) {
            errors.push(err(format!("`{name}` must be longer than zero"), d.span));
        }
    }
    errors.finish()
}

/// `retries` counts attempts in total, so it must be at least 1.
pub(crate) fn retries(retries: Option<&SpannedValue<u32>>) -> darling::Result<()> {
    match retries {
        Some(r) if **r == 0 => Err(err(
            "`retries` is the number of attempts in total and must be at least 1",
            r.span(),
        )),
        _ => Ok(()),
    }
}

/// `errors`, `temporary` unless given.
pub(crate) fn errors_mode(errors: Option<&SpannedValue<ErrorsArg>>) -> ErrorsMode {
    match errors.map_or(ErrorsArg::Temporary, |e| **e) {
        ErrorsArg::Temporary => ErrorsMode::Temporary,
        ErrorsArg::Permanent => ErrorsMode::Permanent,
        ErrorsArg::Ignored => ErrorsMode::Ignored,
    }
}

/// `initial_delay`, fixed or computed.
pub(crate) fn delay(delay: DelayArg) -> Delay {
    match delay {
        DelayArg::Fixed(d) => Delay::Fixed(d.value),
        DelayArg::Computed(f) => Delay::Computed(f.0),
    }
}

/// The path of kopf-runtime in the generated code: `crate = "..."`, or `::kopf_runtime`.
pub(crate) fn krate(krate: Option<CratePath>) -> syn::Path {
    krate.map_or_else(|| syn::parse_quote!(::kopf_runtime), |c| c.0)
}

/// `K` of `Name<K>` (`Arc<K>`, `std::sync::Arc<K>`, `Review<K>`: the last segment, any prefix).
pub(crate) fn generic_of(ty: &Type, name: &str) -> Option<Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != name {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.iter().collect::<Vec<_>>()[..] {
        [GenericArgument::Type(inner)] => Some(inner.clone()),
        _ => None,
    }
}
