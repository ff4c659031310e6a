//! Unit tests of the parse and validate stages (and a smoke test of codegen) on `proc_macro2`
//! input.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemFn;

use crate::expand::{expand, model};
use crate::kind::Kind;
use crate::model::{Delay, HandlerModel, Resource};

mod change;
mod cron;

fn build(kind: Kind, args: TokenStream, func: TokenStream) -> darling::Result<HandlerModel> {
    let func: ItemFn = syn::parse2(func).expect("test input is a function");
    model(kind, args, &func)
}

fn errors(kind: Kind, args: TokenStream, func: TokenStream) -> Vec<String> {
    match build(kind, args, func) {
        Ok(_) => panic!("expected errors"),
        Err(e) => e.flatten().into_iter().map(|e| e.to_string()).collect(),
    }
}

fn pod_daemon() -> TokenStream {
    quote!(
        async fn monitor(pod: Arc<Pod>, stopper: Stopper) {}
    )
}

#[test]
fn defaults() {
    let m = build(Kind::Daemon, quote!(), pod_daemon()).unwrap();
    assert_eq!(m.id, "monitor");
    assert!(m.finalizer && m.function.is_async);
    assert!(matches!(m.resource, Resource::Static { .. }));
    assert_eq!(m.backoff, None);
    assert!(m.labels.is_empty() && m.field.is_none() && m.when.is_none());
}

#[test]
fn every_common_option_is_read() {
    let m = build(
        Kind::Daemon,
        quote!(
            id = "my-id",
            errors = "permanent",
            backoff = "2s",
            retries = 3,
            retry_timeout = "1m",
            timeout = "30s",
            initial_delay = compute,
            labels(
                app = "web",
                "example.com/tier" = present,
                old = absent,
                v = is_v2,
                flag
            ),
            annotations(note = "x"),
            field = "spec.size",
            value = -3,
            when = ready,
            finalizer = false,
            crate = "::renamed",
            cancellation_backoff = "1s",
            cancellation_timeout = "0s",
            cancellation_polling = "5s",
        ),
        pod_daemon(),
    )
    .unwrap();
    assert_eq!(m.id, "my-id");
    assert_eq!(m.retries, Some(3));
    assert_eq!(m.timeout, Some(std::time::Duration::from_secs(30)));
    assert!(matches!(m.initial_delay, Some(Delay::Computed(_))));
    assert_eq!(m.labels.len(), 5);
    assert_eq!(m.field.as_ref().unwrap().segments, ["spec", "size"]);
    assert!(!m.finalizer);
    assert_eq!(m.cancellation_timeout, Some(std::time::Duration::ZERO));
    let krate = &m.krate;
    assert_eq!(quote!(#krate).to_string(), ":: renamed");
}

#[test]
fn timer_schedule() {
    let m = build(
        Kind::Timer,
        quote!(interval = "500ms", sharp, idle = "5m", jitter = "1s"),
        pod_daemon(),
    )
    .unwrap();
    assert_eq!(
        m.schedule.interval,
        Some(std::time::Duration::from_millis(500))
    );
    assert!(m.schedule.sharp && !m.schedule.once);
    let once = build(Kind::Timer, quote!(once), pod_daemon()).unwrap();
    assert!(once.schedule.once);
}

#[test]
fn slack_loosens_a_timers_interval_and_a_daemons_sleeps() {
    let ms = std::time::Duration::from_millis;
    let timer = build(
        Kind::Timer,
        quote!(interval = "1s", slack = "50ms"),
        pod_daemon(),
    );
    assert_eq!(timer.unwrap().slack, Some(ms(50)));
    let daemon = build(Kind::Daemon, quote!(slack = "20ms"), pod_daemon()).unwrap();
    assert_eq!(daemon.slack, Some(ms(20)));
    assert_eq!(
        build(Kind::Daemon, quote!(), pod_daemon()).unwrap().slack,
        None
    );
    let refused = [
        (
            Kind::Timer,
            quote!(idle = "1m", slack = "10ms"),
            "this timer has none",
        ),
        (
            Kind::Timer,
            quote!(interval = "1s", slack = "1s"),
            "must be shorter",
        ),
        (
            Kind::Timer,
            quote!(cron = "@daily", slack = "10ms"),
            "cron occurrences",
        ),
        (Kind::Daemon, quote!(slack = "1500us"), "whole milliseconds"),
        (Kind::Daemon, quote!(slack = "0s"), "longer than zero"),
        (
            Kind::Reconcile,
            quote!(slack = "10ms"),
            "does not apply to `#[reconcile]`",
        ),
    ];
    for (kind, args, expected) in refused {
        let e = errors(kind, args.clone(), pod_daemon());
        assert!(e.iter().any(|e| e.contains(expected)), "{args}: {e:?}");
    }
}

#[test]
fn dynamic_resource() {
    let m = build(
        Kind::Daemon,
        quote!(
            group = "",
            version = "v1",
            plural = "pods",
            kind = "Pod",
            namespaced = false
        ),
        quote!(
            fn f(stopper: Stopper) {}
        ),
    )
    .unwrap();
    let Resource::Dynamic {
        object,
        group,
        plural,
        namespaced,
        ..
    } = m.resource
    else {
        panic!("expected a dynamic resource")
    };
    assert!(object.is_none() && group.is_empty() && plural == "pods" && !namespaced);
}

#[test]
fn unknown_option_suggests_the_right_one() {
    let e = errors(Kind::Timer, quote!(intervall = "5s"), pod_daemon());
    assert!(
        e.iter()
            .any(|e| e.contains("intervall") && e.contains("interval")),
        "{e:?}"
    );
}

#[test]
fn duplicate_option() {
    let e = errors(Kind::Daemon, quote!(id = "a", id = "b"), pod_daemon());
    assert!(e[0].contains("Duplicate field `id`"), "{e:?}");
}

#[test]
fn options_of_the_other_kind_are_named() {
    let e = errors(Kind::Daemon, quote!(interval = "5s"), pod_daemon());
    assert!(e[0].contains("`interval` is a `#[timer]` option"), "{e:?}");
    let e = errors(
        Kind::Timer,
        quote!(once, cancellation_polling = "5s"),
        pod_daemon(),
    );
    assert!(
        e[0].contains("`cancellation_polling` is a `#[daemon]` option"),
        "{e:?}"
    );
}

#[test]
fn contradictions() {
    let cases: [(Kind, TokenStream, &str); 10] = [
        (Kind::Timer, quote!(), "needs a schedule"),
        (
            Kind::Timer,
            quote!(once, interval = "1s"),
            "`once` contradicts",
        ),
        (
            Kind::Timer,
            quote!(idle = "1m", sharp),
            "`sharp` needs an `interval`",
        ),
        (
            Kind::Timer,
            quote!(interval = "0s"),
            "`interval` must be longer than zero",
        ),
        (Kind::Daemon, quote!(value = "x"), "`value` needs a `field`"),
        (Kind::Daemon, quote!(retries = 0), "at least 1"),
        (
            Kind::Daemon,
            quote!(namespaced = true),
            "`namespaced` only applies",
        ),
        (Kind::Daemon, quote!(group = "apps"), "missing `version`"),
        (
            Kind::Daemon,
            quote!(labels(app = "not valid!")),
            "can never match",
        ),
        (
            Kind::Daemon,
            quote!(labels(a = "x", a = present)),
            "filtered twice",
        ),
    ];
    for (kind, args, expected) in cases {
        let e = errors(kind, args.clone(), pod_daemon());
        assert!(e.iter().any(|e| e.contains(expected)), "{args}: {e:?}");
    }
}

#[test]
fn value_and_field_mistakes() {
    let cases: [(TokenStream, &str); 5] = [
        (quote!(field = "spec..x"), "not a field path"),
        (quote!(id = "has space"), "invalid handler id"),
        (quote!(errors = "sometimes"), "sometimes"),
        (quote!(backoff = 5), "\"5s\""),
        (quote!(timeout = "-1s"), "negative"),
    ];
    for (args, expected) in cases {
        let e = errors(Kind::Daemon, args.clone(), pod_daemon());
        assert!(e.iter().any(|e| e.contains(expected)), "{args}: {e:?}");
    }
}

#[test]
fn resource_must_be_known() {
    let e = errors(
        Kind::Daemon,
        quote!(),
        quote!(
            async fn f(stopper: Stopper) {}
        ),
    );
    assert!(
        e[0].contains("cannot tell which resource `f` serves"),
        "{e:?}"
    );
    let e = errors(
        Kind::Daemon,
        quote!(),
        quote!(
            async fn f(o: Arc<DynamicObject>) {}
        ),
    );
    assert!(
        e[0].contains("`DynamicObject` has no static resource type"),
        "{e:?}"
    );
}

#[test]
fn attribute_and_signature_errors_come_together() {
    let e = errors(
        Kind::Timer,
        quote!(intervall = "5s", cancellation_polling = "1s"),
        quote!(
            async fn f<T>(pod: Arc<Pod>) {}
        ),
    );
    assert_eq!(e.len(), 3, "{e:?}");
}

#[test]
fn the_function_is_kept_on_error() {
    let out = expand(Kind::Daemon, quote!(bogus = 1), pod_daemon()).to_string();
    assert!(out.contains("async fn monitor"), "{out}");
    assert!(out.contains("compile_error"), "{out}");
    assert!(!out.contains("__kopf_Handler"), "{out}");
}

#[test]
fn expansion_is_hygienic() {
    let out = expand(Kind::Timer, quote!(interval = "1s"), pod_daemon()).to_string();
    assert!(out.contains("const _ : () ="), "{out}");
    assert!(
        out.contains(":: kopf_runtime :: __private :: inventory :: submit !"),
        "{out}"
    );
    assert!(out.contains(":: core :: result :: Result"), "{out}");
    assert!(!out.contains(" Option <"), "bare std names in {out}");
    assert!(
        out.contains("monitor (__kopf_arg_0 , __kopf_arg_1)"),
        "{out}"
    );
}

#[test]
fn injections_come_before_the_blocking_checks() {
    // A type that is not injectable is reported as that first, not as "async-only".
    let blocking = quote!(
        fn report(pod: Arc<Pod>, count: u32) {}
    );
    let out = expand(Kind::Timer, quote!(interval = "1s"), blocking).to_string();
    let inject = out.find(":: Inject <").unwrap_or(usize::MAX);
    let check = out.find("assert_blocking_safe").unwrap_or(0);
    assert!(inject < check, "{out}");
}

#[test]
fn non_function_items_are_rejected() {
    let out = expand(
        Kind::Daemon,
        quote!(),
        quote!(
            struct S;
        ),
    )
    .to_string();
    assert!(out.contains("goes on a function"), "{out}");
    assert!(out.contains("struct S"), "{out}");
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    const OPTIONS: &[&str] = &[
        "id",
        "errors",
        "backoff",
        "retries",
        "retry_timeout",
        "timeout",
        "initial_delay",
        "labels",
        "annotations",
        "field",
        "value",
        "when",
        "finalizer",
        "optional",
        "crate",
        "cancellation_backoff",
        "cancellation_timeout",
        "cancellation_polling",
        "slack",
        "interval",
        "sharp",
        "idle",
        "jitter",
        "once",
        "cron",
        "tz",
        "missed",
        "group",
        "version",
        "plural",
        "kind",
        "namespaced",
    ];

    proptest! {
        /// Any option name with any simple value: a model or errors, never a panic.
        #[test]
        fn arbitrary_options_never_panic(
            name in "[a-z_]{1,24}",
            value in prop_oneof![
                Just(quote!("5s")), Just(quote!(3)), Just(quote!(true)), Just(quote!(path::f)),
                Just(quote!(-1)), Just(quote!("")), Just(quote!(1.5)),
            ],
            kind in prop::sample::select(vec![
                Kind::Daemon, Kind::Timer, Kind::Create, Kind::Update, Kind::Delete, Kind::Resume,
            ]),
        ) {
            let ident = syn::Ident::new(&name, proc_macro2::Span::call_site());
            let _ = build(kind, quote!(#ident = #value), pod_daemon());
        }

        /// An unknown name is always an error that names it.
        #[test]
        fn unknown_options_are_named(name in "[a-z]{3,12}_x") {
            prop_assume!(!OPTIONS.contains(&name.as_str()));
            let ident = syn::Ident::new(&name, proc_macro2::Span::call_site());
            let e = errors(Kind::Timer, quote!(once, #ident = "1s"), pod_daemon());
            prop_assert!(e.iter().any(|e| e.contains(&name)), "{:?}", e);
        }

        /// Every positive millisecond interval reaches the model unchanged.
        #[test]
        fn intervals_round_trip(ms in 1_u64..100_000_000) {
            let text = format!("{ms}ms");
            let m = build(Kind::Timer, quote!(interval = #text), pod_daemon()).unwrap();
            prop_assert_eq!(m.schedule.interval, Some(std::time::Duration::from_millis(ms)));
        }

        /// Minutes and hours in range make a schedule; out of range, an error on the expression.
        #[test]
        fn cron_fields_are_range_checked(minute in 0_u32..90, hour in 0_u32..30) {
            let expr = format!("{minute} {hour} * * *");
            let result = build(Kind::Timer, quote!(cron = #expr), pod_daemon());
            if minute < 60 && hour < 24 {
                let cron = result.unwrap().schedule.cron;
                prop_assert_eq!(cron.map(|c| c.expr), Some(expr));
            } else {
                let e = result.err().map(|e| e.to_string()).unwrap_or_default();
                prop_assert!(e.contains("invalid cron expression"), "{}", e);
            }
        }
    }
}
