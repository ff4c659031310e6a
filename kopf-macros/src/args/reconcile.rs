//! The options only `#[reconcile]` takes that are not durations: `owns(A, B)`, a list of
//! types; `watches(A, map = f, B, map = g)`, each type followed by its map function; and
//! `cleanup = f`, a function.

use darling::FromMeta;
use darling::ast::NestedMeta;
use syn::spanned::Spanned;
use syn::{Expr, Meta, Type};

use super::values::callable;

/// `owns(ConfigMap, apps::Deployment)`: the child kinds, as types.
#[derive(Debug, Clone, Default)]
pub(crate) struct TypeList(pub(crate) Vec<Type>);

/// `watches(Secret, map = secret_to_apps)`: each related kind with its map function.
#[derive(Debug, Clone, Default)]
pub(crate) struct WatchList(pub(crate) Vec<(Type, Expr)>);

/// `cleanup = app_cleanup`: the function run on deletion, under the finalizer.
#[derive(Debug, Clone)]
pub(crate) struct CleanupArg(pub(crate) Expr);

/// A type written as a path (`ConfigMap`, `k8s_openapi::api::apps::v1::Deployment`).
fn as_type(item: &NestedMeta) -> Option<Type> {
    match item {
        NestedMeta::Meta(Meta::Path(path)) => syn::parse2(quote::quote!(#path)).ok(),
        _ => None,
    }
}

fn span_of(item: &NestedMeta) -> proc_macro2::Span {
    match item {
        NestedMeta::Meta(meta) => meta.span(),
        NestedMeta::Lit(lit) => lit.span(),
        NestedMeta::NameValueInvalidExpr(nv) => nv.span(),
    }
}

impl FromMeta for TypeList {
    fn from_list(items: &[NestedMeta]) -> darling::Result<Self> {
        let mut errors = darling::Error::accumulator();
        let mut types = Vec::new();
        for item in items {
            match as_type(item) {
                Some(ty) => types.push(ty),
                None => errors.push(
                    darling::Error::custom(
                        "`owns` lists the child kinds as types, e.g. `owns(ConfigMap, Deployment)`",
                    )
                    .with_span(&span_of(item)),
                ),
            }
        }
        if items.is_empty() {
            errors.push(darling::Error::custom(
                "`owns` needs at least one child type, e.g. `owns(ConfigMap)`",
            ));
        }
        errors.finish_with(Self(types))
    }
}

/// `map = f` as written in `watches(...)`.
fn as_map(item: &NestedMeta) -> Option<darling::Result<Expr>> {
    let NestedMeta::Meta(Meta::NameValue(nv)) = item else {
        return None;
    };
    nv.path.is_ident("map").then(|| {
        callable(
            &nv.value,
            "`fn(&R) -> Vec<Target>` from a related object to the owners it triggers",
        )
        .map(|c| c.0)
    })
}

impl FromMeta for WatchList {
    fn from_list(items: &[NestedMeta]) -> darling::Result<Self> {
        let mut errors = darling::Error::accumulator();
        let mut watches = Vec::new();
        let mut pending: Option<(Type, proc_macro2::Span)> = None;
        let needs_map = |ty: &Type, span| {
            darling::Error::custom(format!(
                "`watches({}, ...)` needs `map = path::to::fn` right after the type: a \
                 `fn(&{0}) -> Vec<Target>` naming the owners a changed `{0}` triggers",
                quote::quote!(#ty)
            ))
            .with_span(&span)
        };
        for item in items {
            if let Some(map) = as_map(item) {
                match (pending.take(), map) {
                    (Some((ty, _)), Ok(map)) => watches.push((ty, map)),
                    (Some(_), Err(err)) => errors.push(err),
                    (None, _) => errors.push(
                        darling::Error::custom(
                            "`map` must follow the related type it maps, e.g. \
                             `watches(Secret, map = secret_to_apps)`",
                        )
                        .with_span(&span_of(item)),
                    ),
                }
            } else if let Some(ty) = as_type(item) {
                if let Some((previous, span)) = pending.replace((ty, span_of(item))) {
                    errors.push(needs_map(&previous, span));
                }
            } else {
                errors.push(
                    darling::Error::custom(
                        "`watches` lists related types, each followed by its map: \
                         `watches(Secret, map = secret_to_apps)`",
                    )
                    .with_span(&span_of(item)),
                );
            }
        }
        if let Some((ty, span)) = pending {
            errors.push(needs_map(&ty, span));
        }
        if items.is_empty() {
            errors.push(darling::Error::custom(
                "`watches` needs a related type and its map, e.g. \
                 `watches(Secret, map = secret_to_apps)`",
            ));
        }
        errors.finish_with(Self(watches))
    }
}

impl FromMeta for CleanupArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        callable(
            expr,
            "`async fn(Arc<K>, ...) -> Result<(), E>` run on deletion, under the finalizer",
        )
        .map(|c| Self(c.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(tokens: proc_macro2::TokenStream) -> Vec<NestedMeta> {
        NestedMeta::parse_meta_list(tokens).unwrap()
    }

    #[test]
    fn owns_takes_types_only() {
        let ok = TypeList::from_list(&list(quote::quote!(ConfigMap, apps::Deployment))).unwrap();
        assert_eq!(ok.0.len(), 2);
        let err = TypeList::from_list(&list(quote::quote!("ConfigMap", x = 1))).unwrap_err();
        assert_eq!(err.len(), 2);
        assert!(TypeList::from_list(&[]).is_err());
    }

    #[test]
    fn watches_pairs_each_type_with_its_map() {
        let ok = WatchList::from_list(&list(quote::quote!(Secret, map = a, Cm, map = b::c)));
        assert_eq!(ok.unwrap().0.len(), 2);
        let missing = WatchList::from_list(&list(quote::quote!(Secret))).unwrap_err();
        assert!(missing.to_string().contains("needs `map"), "{missing}");
        let two = WatchList::from_list(&list(quote::quote!(A, B, map = f))).unwrap_err();
        assert_eq!(two.len(), 1, "A has no map: {two}");
        let orphan = WatchList::from_list(&list(quote::quote!(map = f))).unwrap_err();
        assert!(orphan.to_string().contains("must follow"), "{orphan}");
        let bad = WatchList::from_list(&list(quote::quote!(A, map = "f"))).unwrap_err();
        assert!(bad.to_string().contains("path to a function"), "{bad}");
    }
}
