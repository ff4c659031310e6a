//! Option values other than durations and metadata filters.

use darling::FromMeta;
use syn::spanned::Spanned;
use syn::{Expr, Lit, UnOp};

use super::duration::{DurationArg, duration_from_expr};

/// `errors = "temporary" | "permanent" | "ignored"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorsArg {
    Temporary,
    Permanent,
    Ignored,
}

impl FromMeta for ErrorsArg {
    fn from_string(value: &str) -> darling::Result<Self> {
        match value {
            "temporary" => Ok(Self::Temporary),
            "permanent" => Ok(Self::Permanent),
            "ignored" => Ok(Self::Ignored),
            other => Err(darling::Error::unknown_value_with_alts(
                other,
                ["temporary", "permanent", "ignored"].iter(),
            )),
        }
    }
}

/// `missed = "skip" | "run_once"`: what a cron timer does about the occurrences it missed while
/// no operator ran it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum MissedArg {
    #[default]
    Skip,
    RunOnce,
}

impl FromMeta for MissedArg {
    fn from_string(value: &str) -> darling::Result<Self> {
        match value {
            "skip" => Ok(Self::Skip),
            "run_once" => Ok(Self::RunOnce),
            other => Err(darling::Error::custom(format!(
                "unknown `missed` value \"{other}\": write \"skip\" (wait for the next \
                 occurrence) or \"run_once\" (run the latest missed occurrence once at start-up)"
            ))),
        }
    }
}

/// A yes/no option such as `optional`: the option's name alone (yes), `= true` or `= false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flag(pub(crate) bool);

impl FromMeta for Flag {
    fn from_word() -> darling::Result<Self> {
        Ok(Self(true))
    }

    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Lit(lit) => match &lit.lit {
                Lit::Bool(b) => Ok(Self(b.value)),
                other => Err(darling::Error::custom(
                    "expected `true` or `false` (unquoted), or the option's name alone for `true`",
                )
                .with_span(other)),
            },
            Expr::Group(group) => Self::from_expr(&group.expr),
            other => Err(darling::Error::custom(
                "expected `true` or `false`, or the option's name alone for `true`",
            )
            .with_span(&other.span())),
        }
    }
}

/// A function given by path (or a non-capturing closure): `when = is_ready`.
#[derive(Debug, Clone)]
pub(crate) struct Callable(pub(crate) Expr);

pub(crate) fn callable(expr: &Expr, what: &str) -> darling::Result<Callable> {
    match expr {
        Expr::Path(_) | Expr::Closure(_) => Ok(Callable(expr.clone())),
        Expr::Group(group) => callable(&group.expr, what),
        other => Err(darling::Error::custom(format!(
            "expected a path to a function {what}, e.g. `crate::filters::is_ready`"
        ))
        .with_span(&other.span())),
    }
}

impl FromMeta for Callable {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        callable(expr, "`fn(&K) -> bool`")
    }
}

/// `initial_delay = "10s"` or `initial_delay = path::to::fn` (a `fn(&K) -> Duration`).
#[derive(Debug, Clone)]
pub(crate) enum DelayArg {
    Fixed(DurationArg),
    Computed(Callable),
}

impl FromMeta for DelayArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Lit(_) => duration_from_expr(expr).map(Self::Fixed),
            Expr::Group(group) => Self::from_expr(&group.expr),
            _ => callable(
                expr,
                "`fn(&K) -> std::time::Duration`, or a duration like \"10s\"",
            )
            .map(Self::Computed),
        }
    }
}

/// A JSON literal of a `value = ...` filter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Literal {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// `value = <literal> | present | absent | path::to::fn`.
#[derive(Debug, Clone)]
pub(crate) enum ValueArg {
    Equals(Literal),
    Present,
    Absent,
    Predicate(Callable),
}

/// Whether `expr` is the bare word `word`.
pub(crate) fn is_word(expr: &Expr, word: &str) -> bool {
    matches!(expr, Expr::Path(p) if p.qself.is_none() && p.path.is_ident(word))
}

fn literal(lit: &Lit, negative: bool) -> darling::Result<Literal> {
    let sign = if negative { "-" } else { "" };
    match lit {
        Lit::Int(i) => format!("{sign}{}", i.base10_digits())
            .parse::<i64>()
            .map(Literal::Int)
            .map_err(|_| darling::Error::custom("integer out of range for i64").with_span(i)),
        Lit::Float(f) => match format!("{sign}{}", f.base10_digits()).parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Literal::Float(v)),
            _ => Err(darling::Error::custom("not a finite number").with_span(f)),
        },
        Lit::Str(s) if !negative => Ok(Literal::Str(s.value())),
        Lit::Bool(b) if !negative => Ok(Literal::Bool(b.value)),
        other => Err(darling::Error::custom(
            "expected a string, number or boolean literal, `present`, `absent`, or a path to a \
             `fn(Option<&serde_json::Value>) -> bool`",
        )
        .with_span(other)),
    }
}

impl FromMeta for ValueArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Lit(lit) => literal(&lit.lit, false).map(Self::Equals),
            Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => match &*unary.expr {
                Expr::Lit(lit) => literal(&lit.lit, true).map(Self::Equals),
                other => Err(darling::Error::custom("expected a number").with_span(&other.span())),
            },
            Expr::Group(group) => Self::from_expr(&group.expr),
            _ if is_word(expr, "present") => Ok(Self::Present),
            _ if is_word(expr, "absent") => Ok(Self::Absent),
            _ => callable(
                expr,
                "`fn(Option<&serde_json::Value>) -> bool`, a literal, `present` or `absent`",
            )
            .map(Self::Predicate),
        }
    }
}

/// `crate = "path::to::kopf_runtime"`.
#[derive(Debug, Clone)]
pub(crate) struct CratePath(pub(crate) syn::Path);

impl FromMeta for CratePath {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Lit(lit) => match &lit.lit {
                Lit::Str(s) => s.parse::<syn::Path>().map(CratePath).map_err(|_| {
                    darling::Error::custom(format!(
                        "`{}` is not a path; write e.g. crate = \"::kopf_runtime\"",
                        s.value()
                    ))
                    .with_span(s)
                }),
                other => Err(darling::Error::custom(
                    "expected a path in a string, e.g. \"::kopf_runtime\"",
                )
                .with_span(other)),
            },
            Expr::Path(p) if p.qself.is_none() => Ok(Self(p.path.clone())),
            Expr::Group(group) => Self::from_expr(&group.expr),
            other => Err(darling::Error::custom(
                "expected a path in a string, e.g. \"::kopf_runtime\"",
            )
            .with_span(&other.span())),
        }
    }
}
