//! `#[validate]` / `#[mutate]` → [`AdmissionModel`]: the object taken as `Arc<K>` or `&K` (or
//! `&mut K` to change it), optionally `Review<K>`, or a connection as `Connect<K>`
//! ([`super::connect`]); the operations, the failure policy and the time to answer. Every
//! problem is reported at once, on its token.

use proc_macro2::{Span, TokenStream};
use quote::format_ident;
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, ReturnType, Type};

use super::common::{generic_of, id, krate};
use super::connect::connect;
use super::error::err;
use super::filters::meta_filters;
use crate::args::admission::{AdmissionArgs, parse};
use crate::model::{AdmissionKind, AdmissionModel, AdmissionParam};

/// Checks the attribute and the function.
pub(crate) fn admission(
    kind: AdmissionKind,
    args: TokenStream,
    func: &ItemFn,
) -> darling::Result<AdmissionModel> {
    let mut errors = darling::Error::accumulator();
    let args = errors.handle(parse(args)).unwrap_or_default();
    header(func, &mut errors);
    let mut resource: Option<Type> = None;
    let mut params = Vec::new();
    let mut unusable = false;
    for input in &func.sig.inputs {
        let Some((param, ty)) = errors.handle(param(kind, input)) else {
            unusable = true;
            continue;
        };
        match &resource {
            Some(first) if show(first) != show(&ty) => {
                errors.push(err(
                    format!(
                        "every parameter names the same object type: this one is `{}`, an \
                         earlier one `{}`",
                        show(&ty),
                        show(first)
                    ),
                    ty.span(),
                ));
            }
            Some(_) => {}
            None => resource = Some(ty),
        }
        params.push(param);
    }
    if kind == AdmissionKind::Mutate
        && !unusable
        && params
            .iter()
            .filter(|p| **p == AdmissionParam::RefMut)
            .count()
            != 1
    {
        errors.push(err(
            "a mutating handler takes the object once as `&mut K`: what it changes there is \
             the patch",
            func.sig.span(),
        ));
    }
    let operations = errors.handle(operations(kind, &args)).unwrap_or_default();
    // A mutating handler's `connect` is refused above; its `subresources` go with it.
    let mutate_connect = kind == AdmissionKind::Mutate
        && (args.operations.iter()).any(|list| list.iter().any(|op| op.is_ident("connect")));
    let subresources = if unusable || mutate_connect {
        Vec::new()
    } else {
        (errors.handle(connect(&args, &operations, &params, func))).unwrap_or_default()
    };
    let ignore_failures = errors.handle(failure_policy(&args)).unwrap_or_default();
    let timeout_seconds = errors.handle(timeout(&args)).unwrap_or(10);
    let id = errors.handle(id(args.id.as_ref(), &func.sig.ident));
    let labels = errors.handle(meta_filters(args.labels.as_ref(), true));
    let annotations = errors.handle(meta_filters(args.annotations.as_ref(), false));
    let Some(resource) = resource else {
        if !unusable {
            errors.push(err(shape(kind), func.sig.span()));
        }
        errors.finish()?;
        return Err(darling::Error::custom(
            "kopf-macros: internal admission error",
        ));
    };
    errors.finish()?;
    Ok(AdmissionModel {
        krate: krate(args.krate),
        kind,
        name: func.sig.ident.clone(),
        id: id.unwrap_or_default(),
        resource,
        params,
        is_async: func.sig.asyncness.is_some(),
        output: match &func.sig.output {
            ReturnType::Default => None,
            ReturnType::Type(_, ty) => Some((**ty).clone()),
        },
        operations,
        subresources,
        ignore_failures,
        timeout_seconds,
        labels: labels.unwrap_or_default(),
        annotations: annotations.unwrap_or_default(),
        when: args.when.map(|when| when.0),
    })
}

/// A type as written, without the token stream's spaces.
fn show(ty: &Type) -> String {
    let text = quote::quote!(#ty).to_string();
    [
        (" :: ", "::"),
        (":: ", "::"),
        (" < ", "<"),
        (" <", "<"),
        (" >", ">"),
        (" ,", ","),
    ]
    .iter()
    .fold(text, |text, (from, to)| text.replace(from, to))
}

fn shape(kind: AdmissionKind) -> &'static str {
    match kind {
        AdmissionKind::Validate => {
            "a validating handler takes the object as `Arc<K>` or `&K`, and optionally \
             `Review<K>` (the operation, the old object, the user, the dry-run flag); or, \
             for `operations(connect)`, `Connect<K>`"
        }
        AdmissionKind::Mutate => {
            "a mutating handler takes the object as `&mut K`, and optionally `Review<K>` (the \
             operation, the old object, the user, the dry-run flag)"
        }
    }
}

fn header(func: &ItemFn, errors: &mut darling::error::Accumulator) {
    let sig = &func.sig;
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(err(
            "admission handlers cannot be generic: the object's type must be concrete",
            sig.generics.span(),
        ));
    }
    if let syn::Safety::Unsafe(token) = &sig.safety {
        errors.push(err("admission handlers cannot be `unsafe`", token.span()));
    }
    if let Some(abi) = &sig.abi {
        errors.push(err(
            "admission handlers cannot have an `extern` ABI",
            abi.span(),
        ));
    }
}

/// One parameter: how it is taken and the `K` it names.
fn param(kind: AdmissionKind, input: &FnArg) -> darling::Result<(AdmissionParam, Type)> {
    let FnArg::Typed(typed) = input else {
        return Err(err(
            "admission handlers are free functions, not methods: remove `self`",
            input.span(),
        ));
    };
    let ty = &*typed.ty;
    let found = match ty {
        Type::Reference(r) if r.mutability.is_some() => {
            Some((AdmissionParam::RefMut, (*r.elem).clone()))
        }
        Type::Reference(r) => Some((AdmissionParam::Ref, (*r.elem).clone())),
        _ => generic_of(ty, "Arc")
            .map(|k| (AdmissionParam::Arc, k))
            .or_else(|| generic_of(ty, "Review").map(|k| (AdmissionParam::Review, k)))
            .or_else(|| generic_of(ty, "Connect").map(|k| (AdmissionParam::Connect, k))),
    };
    let Some((param, resource)) = found else {
        return Err(err(shape(kind), ty.span()));
    };
    match (kind, param) {
        (AdmissionKind::Validate, AdmissionParam::RefMut) => Err(err(
            "a validating handler cannot change the object: take `&K` (changes belong in \
             `#[mutate]`)",
            ty.span(),
        )),
        (AdmissionKind::Mutate, AdmissionParam::Arc | AdmissionParam::Ref) => Err(err(
            "a mutating handler takes the object once, as `&mut K`",
            ty.span(),
        )),
        (AdmissionKind::Mutate, AdmissionParam::Connect) => Err(err(
            "a mutating handler cannot take `Connect<K>`: a connection's options are not \
             changed; check them with `#[validate(operations(connect), subresources(...))]`",
            ty.span(),
        )),
        _ => Ok((param, resource)),
    }
}

/// The operations: given, or `create, update`.
fn operations(kind: AdmissionKind, args: &AdmissionArgs) -> darling::Result<Vec<syn::Ident>> {
    let Some(list) = &args.operations else {
        return Ok(vec![format_ident!("Create"), format_ident!("Update")]);
    };
    if list.is_empty() {
        return Err(err("name at least one operation", list.span()));
    }
    let mut out: Vec<syn::Ident> = Vec::new();
    let mut errors = darling::Error::accumulator();
    for path in list.iter() {
        let word = path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        let variant = match word.to_ascii_lowercase().as_str() {
            "create" => "Create",
            "update" => "Update",
            "delete" if kind == AdmissionKind::Validate => "Delete",
            "delete" => {
                errors.push(err(
                    "a mutating handler cannot act on `delete`: there is no object left to \
                     change; validate deletions with `#[validate(operations(delete))]`",
                    path.span(),
                ));
                continue;
            }
            "connect" if kind == AdmissionKind::Validate => "Connect",
            "connect" => {
                errors.push(err(
                    "a mutating handler cannot act on `connect`: a connection's options are \
                     not changed; check them with `#[validate(operations(connect), \
                     subresources(...))]`",
                    path.span(),
                ));
                continue;
            }
            _ => {
                errors.push(err(
                    format!(
                        "unknown operation `{}`: the operations are `create`, `update`, \
                         `delete` and `connect`",
                        quote::quote!(#path)
                    ),
                    path.span(),
                ));
                continue;
            }
        };
        if out.iter().any(|seen| seen == variant) {
            errors.push(err(format!("`{word}` is named twice"), path.span()));
        } else {
            out.push(syn::Ident::new(variant, Span::call_site()));
        }
    }
    errors.finish_with(out)
}

/// `failure_policy = "fail"` (the default) or `"ignore"`: whether it admits what it cannot answer.
fn failure_policy(args: &AdmissionArgs) -> darling::Result<bool> {
    match args.failure_policy.as_ref() {
        None => Ok(false),
        Some(policy) => match policy.as_str() {
            "fail" | "Fail" => Ok(false),
            "ignore" | "Ignore" => Ok(true),
            other => Err(err(
                format!(
                    "unknown failure policy \"{other}\": \"fail\" refuses requests the handler \
                     cannot answer (the default), \"ignore\" admits them"
                ),
                policy.span(),
            )),
        },
    }
}

/// `timeout = "5s"`: whole seconds from 1 to 30, as the API server allows.
fn timeout(args: &AdmissionArgs) -> darling::Result<u8> {
    let Some(timeout) = args.timeout else {
        return Ok(10);
    };
    let whole = timeout.value.subsec_nanos() == 0;
    match u8::try_from(timeout.value.as_secs()) {
        Ok(seconds @ 1..=30) if whole => Ok(seconds),
        _ => Err(err(
            "the API server waits between 1 and 30 whole seconds for an admission answer: \
             write e.g. timeout = \"5s\"",
            timeout.span,
        )),
    }
}
