//! How every check reports a mistake: a message on the token it is about. A leaf, so that the
//! checks of this folder import it rather than the folder's root.

use proc_macro2::Span;

/// An error with `msg` on `span`.
pub(super) fn err(msg: impl std::fmt::Display, span: Span) -> darling::Error {
    darling::Error::custom(msg).with_span(&span)
}
