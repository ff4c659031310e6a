//! The checks behind [`crate::model::HandlerModel::build`], one function per concern.

use darling::util::SpannedValue;
use proc_macro2::Span;
use syn::Ident;

use crate::args::{DurationArg, MetaCondition, MetaFilters, RawArgs, ValueArg};
use crate::cron;
use crate::model::{Field, Kind, Resource, Schedule};
use crate::signature::{Signature, is_dynamic_object};

pub(crate) fn err(msg: impl std::fmt::Display, span: Span) -> darling::Error {
    darling::Error::custom(msg).with_span(&span)
}

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

fn non_empty(value: &SpannedValue<String>, name: &str) -> darling::Result<String> {
    if value.is_empty() && name != "group" {
        return Err(err(format!("`{name}` cannot be empty"), value.span()));
    }
    Ok((**value).clone())
}

/// The resource: from the object type, or from `group`/`version`/`plural`/`kind`.
pub(crate) fn resource(args: &RawArgs, sig: &Signature) -> darling::Result<Resource> {
    let given = [
        ("group", &args.group),
        ("version", &args.version),
        ("plural", &args.plural),
        ("kind", &args.kind),
    ];
    if given.iter().all(|(_, v)| v.is_none()) {
        if let Some(namespaced) = &args.namespaced {
            return Err(err(
                "`namespaced` only applies to a resource named with `group`, `version`, `plural` \
                 and `kind`; a typed resource knows its scope",
                namespaced.span(),
            ));
        }
        return static_resource(sig);
    }
    let mut errors = darling::Error::accumulator();
    let mut values = Vec::new();
    for (name, value) in given {
        match value {
            Some(v) => values.push(errors.handle(non_empty(v, name)).unwrap_or_default()),
            None => errors.push(err(
                format!(
                    "missing `{name}`: a resource named in the attribute needs `group` (\"\" for \
                     the core group), `version`, `plural` and `kind`"
                ),
                Span::call_site(),
            )),
        }
    }
    errors.finish()?;
    let [group, version, plural, kind] = <[String; 4]>::try_from(values)
        .map_err(|_| darling::Error::custom("kopf-macros: internal resource error"))?;
    let namespaced = args.namespaced.as_ref().is_none_or(|n| **n);
    Ok(Resource::Dynamic {
        object: sig.object.clone(),
        group,
        version,
        kind,
        plural,
        namespaced,
    })
}

fn static_resource(sig: &Signature) -> darling::Result<Resource> {
    match &sig.object {
        Some(object) if is_dynamic_object(object) => Err(darling::Error::custom(
            "`DynamicObject` has no static resource type: name the resource in the attribute, \
             e.g. `group = \"\", version = \"v1\", plural = \"pods\", kind = \"Pod\"`",
        )
        .with_span(object)),
        Some(object) => Ok(Resource::Static {
            object: object.clone(),
        }),
        None => Err(err(
            format!(
                "cannot tell which resource `{}` serves: take the object as a parameter \
                 (`Arc<K>` or `Live<K>` with a `kube::Resource` type such as `Pod` or a \
                 `#[derive(CustomResource)]` struct), or name the resource in the attribute: \
                 `group = \"\", version = \"v1\", plural = \"pods\", kind = \"Pod\"`",
                sig.ident
            ),
            sig.ident.span(),
        )),
    }
}

/// A timer's schedule, checked for contradictions (the cron options in [`crate::cron`]).
pub(crate) fn schedule(kind: Kind, args: &RawArgs, attr: Span) -> darling::Result<Schedule> {
    if kind != Kind::Timer {
        return Ok(Schedule::default()); // timer options were already reported by name
    }
    let mut errors = darling::Error::accumulator();
    let cron = errors.handle(cron::cron(args)).flatten();
    let schedule = Schedule {
        interval: args.interval.map(|d| d.value),
        sharp: args.sharp.as_ref().is_some_and(|s| **s),
        idle: args.idle.map(|d| d.value),
        jitter: args.jitter.map(|d| d.value),
        once: args.once.as_ref().is_some_and(|o| **o),
        cron,
    };
    // With `cron`, its own checks report `interval`, `idle`, `sharp` and `once`.
    let has_cron = args.cron.is_some();
    if let (Some(once), true) = (&args.once, schedule.once)
        && (schedule.interval.is_some() || schedule.idle.is_some())
        && !has_cron
    {
        errors.push(err(
            "`once` contradicts `interval`/`idle`: a one-shot timer runs exactly once per \
             object; remove `once` for a repeating timer",
            once.span(),
        ));
    }
    if let (Some(sharp), true) = (&args.sharp, schedule.sharp)
        && schedule.interval.is_none()
        && !has_cron
    {
        errors.push(err("`sharp` needs an `interval` to keep to", sharp.span()));
    }
    if schedule.interval.is_none() && schedule.idle.is_none() && !schedule.once && !has_cron {
        errors.push(err(
            "a #[timer] needs a schedule: `interval = \"30s\"` (run every 30 s), `idle = \"5m\"` \
             (run once the object has been unchanged for 5 min), both, `cron = \"0 3 * * *\"` \
             (run at 03:00 every day, UTC unless `tz` is given), or `once` (a one-shot timer that \
             runs exactly once per object)",
            attr,
        ));
    }
    errors.finish_with(schedule)
}

fn label_name_ok(name: &str) -> bool {
    let bytes = name.as_bytes();
    !name.is_empty()
        && name.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn key_ok(key: &str) -> bool {
    let (prefix, name) = key
        .rsplit_once('/')
        .map_or((None, key), |(p, n)| (Some(p), n));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    });
    prefix_ok && label_name_ok(name)
}

/// Label or annotation conditions: valid keys, no key twice, label values that can match.
pub(crate) fn meta_filters(
    filters: Option<&SpannedValue<MetaFilters>>,
    labels: bool,
) -> darling::Result<Vec<(String, MetaCondition)>> {
    let Some(filters) = filters else {
        return Ok(Vec::new());
    };
    let what = if labels { "label" } else { "annotation" };
    let mut errors = darling::Error::accumulator();
    let mut out: Vec<(String, MetaCondition)> = Vec::new();
    for entry in &filters.0 {
        if !key_ok(&entry.key) {
            errors.push(err(
                format!(
                    "\"{}\" is not a valid {what} key: an optional DNS prefix and `/`, then up to \
                     63 letters, digits, `-`, `_` or `.`, starting and ending alphanumeric",
                    entry.key
                ),
                entry.key_span,
            ));
        } else if out.iter().any(|(k, _)| *k == entry.key) {
            errors.push(err(
                format!("{what} `{}` is filtered twice", entry.key),
                entry.key_span,
            ));
        }
        if let (true, MetaCondition::Equals(value)) = (labels, &entry.condition)
            && !value.is_empty()
            && !label_name_ok(value)
        {
            errors.push(err(
                format!(
                    "\"{value}\" can never match: label values are at most 63 letters, digits, \
                     `-`, `_` or `.`, starting and ending alphanumeric"
                ),
                entry.value_span,
            ));
        }
        out.push((entry.key.clone(), entry.condition.clone()));
    }
    errors.finish_with(out)
}

/// `field`/`value`: a dotted path; `value` needs `field`.
pub(crate) fn field(
    field: Option<&SpannedValue<String>>,
    value: Option<&SpannedValue<ValueArg>>,
) -> darling::Result<Option<Field>> {
    let Some(field) = field else {
        return match value {
            Some(value) => Err(err(
                "`value` needs a `field` to compare, e.g. `field = \"spec.enabled\", value = true`",
                value.span(),
            )),
            None => Ok(None),
        };
    };
    let segments: Vec<String> = field.split('.').map(str::to_owned).collect();
    if segments.iter().any(String::is_empty) {
        return Err(err(
            format!(
                "\"{}\" is not a field path: write dotted keys, e.g. \"spec.replicas\"",
                field.as_str()
            ),
            field.span(),
        ));
    }
    let value = value.map_or(ValueArg::Present, |v| (**v).clone());
    Ok(Some(Field {
        path: (**field).clone(),
        segments,
        value,
    }))
}

/// Durations that cannot be zero.
pub(crate) fn durations(args: &RawArgs) -> darling::Result<()> {
    let positive: [(&str, Option<DurationArg>); 6] = [
        ("interval", args.interval),
        ("idle", args.idle),
        ("jitter", args.jitter),
        ("timeout", args.timeout),
        ("retry_timeout", args.retry_timeout),
        ("cancellation_polling", args.cancellation_polling),
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
