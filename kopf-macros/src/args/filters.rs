//! `labels(...)` and `annotations(...)`: conditions on metadata keys.

use darling::FromMeta;
use proc_macro2::Span;
use syn::ext::IdentExt as _;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Lit, LitStr, Meta, Token};

use super::values::{Callable, callable, is_word};

/// The condition on one key.
#[derive(Debug, Clone)]
pub(crate) enum MetaCondition {
    Equals(String),
    Present,
    Absent,
    Predicate(Callable),
}

/// One `key = condition` entry, with the key's span.
#[derive(Debug, Clone)]
pub(crate) struct MetaEntry {
    pub(crate) key: String,
    pub(crate) key_span: Span,
    pub(crate) condition: MetaCondition,
    pub(crate) value_span: Span,
}

/// The entries of `labels(...)` or `annotations(...)`, as written (checked by `crate::validate`).
#[derive(Debug, Clone, Default)]
pub(crate) struct MetaArg(pub(crate) Vec<MetaEntry>);

struct RawEntry {
    key: String,
    key_span: Span,
    value: Option<Expr>,
}

impl Parse for RawEntry {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lookahead = input.lookahead1();
        let (key, key_span) = if lookahead.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            (lit.value(), lit.span())
        } else if lookahead.peek(syn::Ident::peek_any) {
            let ident = syn::Ident::parse_any(input)?;
            (ident.to_string(), ident.span())
        } else {
            return Err(lookahead.error());
        };
        let value = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            Some(input.parse::<Expr>()?)
        } else {
            None
        };
        Ok(Self {
            key,
            key_span,
            value,
        })
    }
}

fn condition(value: &Expr) -> darling::Result<MetaCondition> {
    match value {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Str(s) => Ok(MetaCondition::Equals(s.value())),
            other => Err(darling::Error::custom(
                "label and annotation values are strings; write the value in quotes",
            )
            .with_span(other)),
        },
        Expr::Group(group) => condition(&group.expr),
        _ if is_word(value, "present") => Ok(MetaCondition::Present),
        _ if is_word(value, "absent") => Ok(MetaCondition::Absent),
        _ => callable(
            value,
            "`fn(Option<&str>) -> bool`, a string, `present` or `absent`",
        )
        .map(MetaCondition::Predicate),
    }
}

fn entries(tokens: proc_macro2::TokenStream) -> darling::Result<MetaArg> {
    let parsed = Punctuated::<RawEntry, Token![,]>::parse_terminated.parse2(tokens)?;
    let mut errors = darling::Error::accumulator();
    let mut out = Vec::new();
    for raw in parsed {
        let (condition, value_span) = match &raw.value {
            None => (Some(MetaCondition::Present), raw.key_span),
            Some(value) => (errors.handle(condition(value)), value.span()),
        };
        if let Some(condition) = condition {
            out.push(MetaEntry {
                key: raw.key,
                key_span: raw.key_span,
                condition,
                value_span,
            });
        }
    }
    errors.finish_with(MetaArg(out))
}

impl FromMeta for MetaArg {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        match item {
            Meta::List(list) => entries(list.tokens.clone()),
            _ => Err(darling::Error::custom(
                "expected a list, e.g. labels(app = \"web\", \"example.com/tier\" = present)",
            )
            .with_span(item)),
        }
    }
}
