//! The filters every kind of handler takes: `labels(...)`, `annotations(...)` and
//! `field`/`value`, checked and turned into the model's conditions.

use darling::util::SpannedValue;

use super::error::err;
use crate::args::{Literal, MetaArg, MetaCondition, ValueArg};
use crate::model::{Field, JsonLiteral, MetaFilter, ValueFilter};

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
    filters: Option<&SpannedValue<MetaArg>>,
    labels: bool,
) -> darling::Result<Vec<(String, MetaFilter)>> {
    let Some(filters) = filters else {
        return Ok(Vec::new());
    };
    let what = if labels { "label" } else { "annotation" };
    let mut errors = darling::Error::accumulator();
    let mut out: Vec<(String, MetaFilter)> = Vec::new();
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
        out.push((entry.key.clone(), meta_filter(&entry.condition)));
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
    let value = value.map_or(ValueFilter::Present, |v| value_filter(v));
    Ok(Some(Field {
        path: (**field).clone(),
        segments,
        value,
    }))
}

fn meta_filter(condition: &MetaCondition) -> MetaFilter {
    match condition {
        MetaCondition::Equals(value) => MetaFilter::Equals(value.clone()),
        MetaCondition::Present => MetaFilter::Present,
        MetaCondition::Absent => MetaFilter::Absent,
        MetaCondition::Predicate(f) => MetaFilter::Predicate(f.0.clone()),
    }
}

fn value_filter(value: &ValueArg) -> ValueFilter {
    match value {
        ValueArg::Equals(literal) => ValueFilter::Equals(match literal {
            Literal::Str(s) => JsonLiteral::Str(s.clone()),
            Literal::Int(i) => JsonLiteral::Int(*i),
            Literal::Float(f) => JsonLiteral::Float(*f),
            Literal::Bool(b) => JsonLiteral::Bool(*b),
        }),
        ValueArg::Present => ValueFilter::Present,
        ValueArg::Absent => ValueFilter::Absent,
        ValueArg::Predicate(f) => ValueFilter::Predicate(f.0.clone()),
    }
}
