//! `#[validate(operations(connect), subresources(...))]`: a handler asked before a connection
//! is opened to a subresource (`kubectl exec`, `attach`, `port-forward`, `proxy`). Such a
//! request carries the connection's options, not the object, so the handler takes
//! `Connect<K>` alone and has no object filters; and it names the subresources.

use proc_macro2::Span;
use syn::ItemFn;
use syn::spanned::Spanned;

use super::error::err;
use crate::args::admission::AdmissionArgs;
use crate::model::AdmissionParam;

/// The subresources the API server opens connections to.
const SUBRESOURCES: [&str; 4] = ["exec", "attach", "portforward", "proxy"];

/// Checks how `connect`, `Connect<K>` and `subresources(...)` go together; the subresources.
pub(super) fn connect(
    args: &AdmissionArgs,
    operations: &[syn::Ident],
    params: &[AdmissionParam],
    func: &ItemFn,
) -> darling::Result<Vec<String>> {
    let connects = operations.iter().any(|op| op == "Connect");
    let takes = params.contains(&AdmissionParam::Connect);
    let mut errors = darling::Error::accumulator();
    if !connects {
        if takes {
            errors.push(err(
                "`Connect<K>` is given to handlers of connections: write \
                 `#[validate(operations(connect), subresources(exec))]`",
                func.sig.inputs.span(),
            ));
        }
        if let Some(list) = &args.subresources {
            errors.push(err(
                "`subresources(...)` names what `connect` requests connect to: add \
                 `operations(connect)`",
                list.span(),
            ));
        }
        return errors.finish_with(Vec::new());
    }
    let span = (args.operations.as_ref()).map_or_else(Span::call_site, |list| list.span());
    if operations.len() > 1 {
        errors.push(err(
            "`connect` requests carry a connection's options, not an object: a handler of \
             `connect` has no other operation (write a second handler for the others)",
            span,
        ));
    }
    if params != [AdmissionParam::Connect] {
        errors.push(err(
            "a handler of `connect` takes one parameter, `Connect<K>`: the subresource, the \
             connection's options, the user",
            func.sig.inputs.span(),
        ));
    }
    let filters = [
        args.labels.as_ref().map(|labels| labels.span()),
        args.annotations
            .as_ref()
            .map(|annotations| annotations.span()),
        args.when.as_ref().map(|when| when.0.span()),
    ];
    for span in filters.into_iter().flatten() {
        errors.push(err(
            "a `connect` request carries a connection's options, not the object: there are \
             no labels, annotations or object for a filter to check",
            span,
        ));
    }
    let subresources = errors.handle(subresources(args, span)).unwrap_or_default();
    errors.finish_with(subresources)
}

/// `subresources(exec, attach, portforward, proxy)`: at least one, each once.
fn subresources(args: &AdmissionArgs, span: Span) -> darling::Result<Vec<String>> {
    let Some(list) = &args.subresources else {
        return Err(err(
            "name the subresources connected to: `subresources(exec)`, or any of `exec`, \
             `attach`, `portforward`, `proxy`",
            span,
        ));
    };
    if list.is_empty() {
        return Err(err("name at least one subresource", list.span()));
    }
    let mut errors = darling::Error::accumulator();
    let mut out: Vec<String> = Vec::new();
    for path in list.iter() {
        let word = (path.get_ident()).map_or_else(String::new, ToString::to_string);
        if !SUBRESOURCES.contains(&word.as_str()) {
            errors.push(err(
                format!(
                    "`{}` is not a subresource connections are opened to: the subresources \
                     are `exec`, `attach`, `portforward` and `proxy`",
                    quote::quote!(#path)
                ),
                path.span(),
            ));
        } else if out.contains(&word) {
            errors.push(err(format!("`{word}` is named twice"), path.span()));
        } else {
            out.push(word);
        }
    }
    errors.finish_with(out)
}
