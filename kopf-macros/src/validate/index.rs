//! `#[index]` → [`IndexModel`]: a plain `fn` (it runs in the watch, between two events) taking
//! the object as `Arc<K>` and returning a concrete collection of `(key, value)` pairs. Every
//! problem is reported at once, on its token.

use proc_macro2::TokenStream;
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, ReturnType, Type};

use super::common::{generic_of, krate};
use super::error::err;
use super::filters::meta_filters;
use crate::args::index::parse;
use crate::model::IndexModel;

const SHAPE: &str = "an index function is `fn name(object: Arc<K>) -> C`, where `C` is a \
                     collection of `(key, value)` pairs (`Vec<(K, V)>`, `Option<(K, V)>`, a map)";

/// Checks the attribute and the function.
pub(crate) fn index(args: TokenStream, func: &ItemFn) -> darling::Result<IndexModel> {
    let mut errors = darling::Error::accumulator();
    let args = errors.handle(parse(args));
    let sig = &func.sig;
    if let Some(asyncness) = sig.asyncness {
        errors.push(err(
            "an index function cannot be `async`: it runs in the watch, between two events, and \
             must not wait; compute the pairs from the object alone",
            asyncness.span(),
        ));
    }
    if let syn::Safety::Unsafe(token) = &sig.safety {
        errors.push(err("an index function cannot be `unsafe`", token.span()));
    }
    if !sig.generics.params.is_empty() {
        errors.push(err(
            "an index function cannot be generic",
            sig.generics.span(),
        ));
    }
    let resource = errors.handle(resource(func));
    let pairs = errors.handle(pairs(&sig.output, func));
    let labels = args
        .as_ref()
        .and_then(|a| errors.handle(meta_filters(a.labels.as_ref(), true)));
    let annotations =
        (args.as_ref()).and_then(|a| errors.handle(meta_filters(a.annotations.as_ref(), false)));
    errors.finish()?;
    match (args, resource, pairs) {
        (Some(args), Some(resource), Some(pairs)) => Ok(IndexModel {
            krate: krate(args.krate),
            name: sig.ident.clone(),
            vis: func.vis.clone(),
            resource,
            pairs,
            labels: labels.unwrap_or_default(),
            annotations: annotations.unwrap_or_default(),
            when: args.when.map(|when| when.0),
        }),
        _ => Err(darling::Error::custom("kopf-macros: internal index error")),
    }
}

/// `K` of the one parameter, `Arc<K>`.
fn resource(func: &ItemFn) -> darling::Result<Type> {
    let inputs = &func.sig.inputs;
    let [FnArg::Typed(param)] = inputs.iter().collect::<Vec<_>>()[..] else {
        let span = if inputs.is_empty() {
            func.sig.span()
        } else {
            inputs.span()
        };
        return Err(err(SHAPE, span));
    };
    generic_of(&param.ty, "Arc").ok_or_else(|| {
        let hint = match &*param.ty {
            Type::Reference(r) => {
                let elem = &r.elem;
                format!(": take `Arc<{}>`", quote::quote!(#elem))
            }
            _ => String::new(),
        };
        err(format!("{SHAPE}{hint}"), param.ty.span())
    })
}

/// The return type, which must be named (`impl Trait` has no `Item` the macro can name).
fn pairs(output: &ReturnType, func: &ItemFn) -> darling::Result<Type> {
    match output {
        ReturnType::Default => Err(err(format!("{SHAPE}: return the pairs"), func.sig.span())),
        ReturnType::Type(_, ty) if matches!(**ty, Type::ImplTrait(_)) => Err(err(
            "return a named collection (`Vec<(K, V)>`, `Option<(K, V)>`, a map), not \
             `impl Trait`: the index's key and value types are read from it",
            ty.span(),
        )),
        ReturnType::Type(_, ty) => Ok((**ty).clone()),
    }
}
