//! Spans for generated code: the user's tokens carry the errors, not the attribute.

use proc_macro2::{Group, Span, TokenStream, TokenTree};

/// Gives every token (recursively) `span`, so that a type error in generated code is reported
/// on the user's token rather than on the attribute.
pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Group(group) => {
                let mut respanned = Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(span);
                TokenTree::Group(respanned)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}
