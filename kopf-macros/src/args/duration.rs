//! Duration literals (`"500ms"`, `"30s"`, `"5m"`), parsed at expansion time.

use std::time::Duration;

use darling::FromMeta;
use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Expr, Lit};

/// A duration written as a string literal with a unit, with the literal's span.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DurationArg {
    pub(crate) value: Duration,
    pub(crate) span: Span,
}

/// Parses a duration as written in an attribute. The message says what to write instead.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("empty duration; write it with a unit, e.g. \"30s\"".to_owned());
    }
    if trimmed.starts_with('-') {
        return Err(format!("durations cannot be negative: \"{text}\""));
    }
    if trimmed.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "the duration \"{text}\" has no unit; write e.g. \"{trimmed}s\""
        ));
    }
    humantime::parse_duration(trimmed).map_err(|e| {
        format!(
            "invalid duration \"{text}\": {e}; write a number with a unit, e.g. \"500ms\", \
             \"30s\", \"5m\", \"1h 30m\""
        )
    })
}

/// A duration from an attribute value expression.
pub(crate) fn duration_from_expr(expr: &Expr) -> darling::Result<DurationArg> {
    match expr {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Str(s) => parse_duration(&s.value())
                .map(|value| DurationArg {
                    value,
                    span: s.span(),
                })
                .map_err(|msg| darling::Error::custom(msg).with_span(s)),
            Lit::Int(i) => Err(darling::Error::custom(format!(
                "write durations as a string with a unit, e.g. \"{}s\"",
                i.base10_digits()
            ))
            .with_span(i)),
            other => Err(darling::Error::custom(
                "expected a duration as a string with a unit, e.g. \"30s\"",
            )
            .with_span(other)),
        },
        Expr::Group(group) => duration_from_expr(&group.expr),
        other => Err(darling::Error::custom(
            "expected a duration as a string with a unit, e.g. \"30s\"",
        )
        .with_span(&other.span())),
    }
}

impl FromMeta for DurationArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        duration_from_expr(expr)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn mistakes_are_explained() {
        assert!(parse_duration("-5s").unwrap_err().contains("negative"));
        assert!(parse_duration("30").unwrap_err().contains("no unit"));
        assert!(parse_duration("").unwrap_err().contains("empty"));
        assert!(
            parse_duration("5 parsecs")
                .unwrap_err()
                .contains("invalid duration")
        );
    }

    #[test]
    fn integer_literal_suggests_a_string() {
        let err = duration_from_expr(&syn::parse_quote!(30)).unwrap_err();
        assert!(err.to_string().contains("\"30s\""), "{err}");
    }

    proptest! {
        #[test]
        fn any_millis_round_trip(ms in 0_u64..10_000_000_000) {
            prop_assert_eq!(parse_duration(&format!("{ms}ms")), Ok(Duration::from_millis(ms)));
        }

        #[test]
        fn seconds_and_minutes_add_up(m in 0_u64..100_000, s in 0_u64..60) {
            prop_assert_eq!(
                parse_duration(&format!("{m}m {s}s")),
                Ok(Duration::from_secs(m * 60 + s))
            );
        }

        #[test]
        fn never_panics(text in "\\PC{0,20}") {
            let _ = parse_duration(&text);
        }

        #[test]
        fn negative_is_always_rejected(n in 0_u64..1_000_000, unit in "(ms|s|m|h)") {
            let text = format!("-{n}{unit}");
            prop_assert!(parse_duration(&text).unwrap_err().contains("negative"));
        }
    }
}
