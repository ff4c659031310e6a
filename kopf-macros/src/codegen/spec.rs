//! The `HandlerSpec` constant: every option as a const expression.

use std::time::Duration;

use proc_macro2::{Literal, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::kind::Kind;
use crate::model::{
    Cron, Delay, ErrorsMode, Field, HandlerModel, JsonLiteral, MetaFilter, Missed, Reconcile,
    ValueFilter, Watched,
};

/// `::core::time::Duration::new(secs, nanos)`.
pub(crate) fn duration(d: Duration) -> TokenStream {
    let secs = Literal::u64_suffixed(d.as_secs());
    let nanos = Literal::u32_suffixed(d.subsec_nanos());
    quote!(::core::time::Duration::new(#secs, #nanos))
}

fn opt_duration(d: Option<Duration>) -> TokenStream {
    match d {
        Some(d) => {
            let d = duration(d);
            quote!(::core::option::Option::Some(#d))
        }
        None => quote!(::core::option::Option::None),
    }
}

/// Label or annotation conditions as a `&'static [(key, MetaFilter)]`.
pub(crate) fn meta_filters(krate: &syn::Path, entries: &[(String, MetaFilter)]) -> TokenStream {
    let items = entries.iter().map(|(key, condition)| {
        let filter = match condition {
            MetaFilter::Equals(v) => quote!(#krate::engine::MetaFilter::Equals(#v)),
            MetaFilter::Present => quote!(#krate::engine::MetaFilter::Present),
            MetaFilter::Absent => quote!(#krate::engine::MetaFilter::Absent),
            MetaFilter::Predicate(f) => {
                quote_spanned!(f.span()=> #krate::engine::MetaFilter::Predicate(#f))
            }
        };
        quote!((#key, #filter))
    });
    quote!(&[#(#items),*])
}

fn field(krate: &syn::Path, field: Option<&Field>) -> TokenStream {
    let Some(Field {
        path,
        segments,
        value,
    }) = field
    else {
        return quote!(::core::option::Option::None);
    };
    let value = match value {
        ValueFilter::Present => quote!(#krate::engine::ValueFilter::Present),
        ValueFilter::Absent => quote!(#krate::engine::ValueFilter::Absent),
        ValueFilter::Equals(lit) => {
            let lit = match lit {
                JsonLiteral::Str(s) => quote!(#krate::engine::JsonLiteral::Str(#s)),
                JsonLiteral::Int(i) => {
                    let i = Literal::i64_suffixed(*i);
                    quote!(#krate::engine::JsonLiteral::Int(#i))
                }
                JsonLiteral::Float(f) => {
                    let f = Literal::f64_suffixed(*f);
                    quote!(#krate::engine::JsonLiteral::Float(#f))
                }
                JsonLiteral::Bool(b) => quote!(#krate::engine::JsonLiteral::Bool(#b)),
            };
            quote!(#krate::engine::ValueFilter::Equals(#lit))
        }
        ValueFilter::Predicate(f) => {
            quote_spanned!(f.span()=> #krate::engine::ValueFilter::Predicate(#f))
        }
    };
    quote! {
        ::core::option::Option::Some(#krate::engine::FieldFilter {
            path: #path,
            segments: &[#(#segments),*],
            value: #value,
        })
    }
}

/// A change handler's options: `#[on_update(field = ...)]` watches its field.
fn change(krate: &syn::Path, watch: Option<&Watched>) -> TokenStream {
    let Some(Watched {
        path,
        segments,
        value_type,
    }) = watch
    else {
        return quote!(#krate::engine::ChangeOptions::NONE);
    };
    let decoded_as = value_type.as_ref().map(|ty| {
        let name = type_text(ty);
        quote_spanned! {ty.span()=>
            .decoded_as(#krate::engine::FieldType {
                name: #name,
                decode: #krate::__private::decode_probe::<#ty>,
            })
        }
    });
    quote! {
        #krate::engine::ChangeOptions::watching(#krate::engine::WatchedField {
            path: #path,
            segments: &[#(#segments),*],
        })
        #decoded_as
    }
}

/// A type as written, for messages (`Option < String >` → `Option<String>`).
fn type_text(ty: &syn::Type) -> String {
    let mut text = quote!(#ty).to_string();
    for (from, to) in [
        (" :: ", "::"),
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ,", ","),
    ] {
        text = text.replace(from, to);
    }
    text
}

/// The `HandlerSpec` value (a const expression). Fields not listed come from
/// `HandlerSpec::new`, so the generated code keeps compiling when the spec grows.
pub(crate) fn spec(model: &HandlerModel) -> TokenStream {
    let krate = &model.krate;
    let id = &model.id;
    let kind = match model.kind {
        Kind::Daemon => quote!(#krate::engine::HandlerKind::Daemon),
        Kind::Timer => quote!(#krate::engine::HandlerKind::Timer),
        Kind::Create => quote!(#krate::engine::HandlerKind::Create),
        Kind::Update => quote!(#krate::engine::HandlerKind::Update),
        Kind::Delete => quote!(#krate::engine::HandlerKind::Delete),
        Kind::Resume => quote!(#krate::engine::HandlerKind::Resume),
        Kind::Reconcile => quote!(#krate::engine::HandlerKind::Reconcile),
    };
    let errors = match model.errors {
        ErrorsMode::Temporary => quote!(#krate::engine::ErrorsMode::Temporary),
        ErrorsMode::Permanent => quote!(#krate::engine::ErrorsMode::Permanent),
        ErrorsMode::Ignored => quote!(#krate::engine::ErrorsMode::Ignored),
    };
    let blocking = !model.function.is_async;
    let backoff = model.backoff.map_or_else(
        || match model.kind {
            Kind::Reconcile => quote!(#krate::engine::ReconcileOptions::DEFAULT_BACKOFF),
            _ => quote!(#krate::engine::HandlerSpec::DEFAULT_BACKOFF),
        },
        duration,
    );
    let backoff_set = model.backoff.is_some();
    let retries = match model.retries {
        Some(n) => quote!(::core::option::Option::Some(#n)),
        None => quote!(::core::option::Option::None),
    };
    let retry_timeout = opt_duration(model.retry_timeout);
    let timeout = opt_duration(model.timeout);
    let initial_delay = opt_duration(match &model.initial_delay {
        Some(Delay::Fixed(d)) => Some(*d),
        _ => None,
    });
    let finalizer = model.finalizer;
    let cancellation_backoff = opt_duration(model.cancellation_backoff);
    let cancellation_timeout = opt_duration(model.cancellation_timeout);
    let cancellation_polling = model.cancellation_polling.map_or_else(
        || quote!(#krate::engine::HandlerSpec::DEFAULT_CANCELLATION_POLLING),
        duration,
    );
    let slack = opt_duration(model.slack);
    let schedule = schedule(model);
    let labels = meta_filters(krate, &model.labels);
    let annotations = meta_filters(krate, &model.annotations);
    let field = field(krate, model.field.as_ref());
    let change = change(krate, model.watch.as_ref());
    let reconcile = reconcile(krate, model.reconcile.as_ref());
    quote! {
        #krate::engine::HandlerSpec {
            location: #krate::engine::SourceLocation {
                file: ::core::file!(),
                line: ::core::line!(),
                column: ::core::column!(),
            },
            blocking: #blocking,
            errors: #errors,
            backoff: #backoff,
            backoff_set: #backoff_set,
            retries: #retries,
            retry_timeout: #retry_timeout,
            timeout: #timeout,
            initial_delay: #initial_delay,
            finalizer: #finalizer,
            cancellation_backoff: #cancellation_backoff,
            cancellation_timeout: #cancellation_timeout,
            cancellation_polling: #cancellation_polling,
            slack: #slack,
            schedule: #schedule,
            change: #change,
            reconcile: #reconcile,
            filters: #krate::engine::Filters {
                labels: #labels,
                annotations: #annotations,
                field: #field,
                ..#krate::engine::HandlerSpec::new(#id, #kind).filters
            },
            ..#krate::engine::HandlerSpec::new(#id, #kind)
        }
    }
}

/// The name of the generated map function of the `index`th `watches` entry.
pub(crate) fn map_fn_name(index: usize) -> syn::Ident {
    quote::format_ident!("__kopf_map_{}", index)
}

/// A reconcile handler's options (`ReconcileOptions::NONE` for the other kinds). The maps of
/// `watches` are the functions [`map_fn_name`] names, generated beside the handler.
fn reconcile(krate: &syn::Path, reconcile: Option<&Reconcile>) -> TokenStream {
    let Some(Reconcile {
        owns,
        watches,
        backoff_max,
        debounce,
        cleanup,
    }) = reconcile
    else {
        return quote!(#krate::engine::ReconcileOptions::NONE);
    };
    let owns = owns.iter().map(|ty| {
        quote_spanned!(ty.span()=> #krate::__private::kind_ref::<#ty> as fn() -> #krate::engine::KindRef)
    });
    let watches = watches.iter().enumerate().map(|(index, (ty, _))| {
        let map = map_fn_name(index);
        quote! {
            #krate::engine::Related {
                kind: #krate::__private::kind_ref::<#ty>,
                map: #map,
            }
        }
    });
    let backoff_max = backoff_max.map_or_else(
        || quote!(#krate::engine::ReconcileOptions::DEFAULT_BACKOFF_MAX),
        duration,
    );
    let debounce = opt_duration(*debounce);
    let cleanup = cleanup.is_some();
    quote! {
        #krate::engine::ReconcileOptions {
            owns: &[#(#owns),*],
            watches: &[#(#watches),*],
            backoff_max: #backoff_max,
            debounce: #debounce,
            cleanup: #cleanup,
        }
    }
}

fn cron(krate: &syn::Path, cron: Option<&Cron>) -> TokenStream {
    let Some(Cron { expr, tz, missed }) = cron else {
        return quote!(::core::option::Option::None);
    };
    let missed = match missed {
        Missed::Skip => quote!(#krate::engine::Missed::Skip),
        Missed::RunOnce => quote!(#krate::engine::Missed::RunOnce),
    };
    quote! {
        ::core::option::Option::Some(#krate::engine::CronSchedule {
            expr: #expr,
            tz: #tz,
            missed: #missed,
        })
    }
}

fn schedule(model: &HandlerModel) -> TokenStream {
    let krate = &model.krate;
    let s = &model.schedule;
    let interval = opt_duration(s.interval);
    let idle = opt_duration(s.idle);
    let jitter = opt_duration(s.jitter);
    let (sharp, once) = (s.sharp, s.once);
    let cron = cron(krate, s.cron.as_ref());
    quote! {
        #krate::engine::TimerSchedule {
            interval: #interval,
            sharp: #sharp,
            idle: #idle,
            jitter: #jitter,
            once: #once,
            cron: #cron,
            ..#krate::engine::HandlerSpec::new("", #krate::engine::HandlerKind::Timer).schedule
        }
    }
}
