//! The change handlers: their options, the watched field of `#[on_update]`, the parameters only
//! some kinds are given, and their code.

use proc_macro2::TokenStream;
use quote::quote;

use super::{build, errors};
use crate::expand::expand;
use crate::kind::Kind;

const CHANGE_KINDS: [Kind; 4] = [Kind::Create, Kind::Update, Kind::Delete, Kind::Resume];

fn pod_handler() -> TokenStream {
    quote!(
        async fn handle(pod: Arc<Pod>) {}
    )
}

#[test]
fn change_handler_defaults() {
    for kind in CHANGE_KINDS {
        let m = build(kind, quote!(), pod_handler()).unwrap();
        assert_eq!(m.id, "handle");
        assert_eq!(m.finalizer, kind == Kind::Delete, "{kind:?}");
        assert_eq!(m.schedule, crate::model::Schedule::default());
        assert!(m.watch.is_none() && m.field.is_none() && m.initial_delay.is_none());
    }
}

#[test]
fn every_shared_option_is_read_by_change_handlers() {
    for kind in CHANGE_KINDS {
        let m = build(
            kind,
            quote!(
                id = "my-id",
                errors = "permanent",
                backoff = "2s",
                retries = 3,
                retry_timeout = "1m",
                timeout = "30s",
                labels(app = "web"),
                annotations(note = present),
                field = "spec.size",
                value = 3,
                when = ready,
                crate = "::renamed",
                cancellation_backoff = "1s",
                cancellation_timeout = "5s",
            ),
            pod_handler(),
        )
        .unwrap();
        assert_eq!((m.id.as_str(), m.retries), ("my-id", Some(3)), "{kind:?}");
        assert_eq!(
            m.cancellation_timeout,
            Some(std::time::Duration::from_secs(5))
        );
        assert_eq!(m.field.as_ref().unwrap().segments, ["spec", "size"]);
        assert_eq!(m.watch.is_some(), kind == Kind::Update, "{kind:?}");
    }
}

#[test]
fn only_delete_handlers_are_optional() {
    for (args, finalizer) in [
        (quote!(optional = true), false),
        (quote!(optional), false),
        (quote!(optional = false), true),
    ] {
        let m = build(Kind::Delete, args.clone(), pod_handler()).unwrap();
        assert_eq!(m.finalizer, finalizer, "{args}");
    }
    for kind in [
        Kind::Daemon,
        Kind::Timer,
        Kind::Create,
        Kind::Update,
        Kind::Resume,
    ] {
        let e = errors(kind, quote!(optional = true), pod_handler());
        assert_eq!(e.len(), 1, "{kind:?}: {e:?}");
        assert!(
            e[0].contains("only `#[on_delete]` can be optional"),
            "{kind:?}: {e:?}"
        );
    }
    let e = errors(Kind::Daemon, quote!(optional), pod_handler());
    assert!(e[0].contains("`finalizer = false`"), "{e:?}");
    for args in [
        quote!(optional = "yes"),
        quote!(optional = 1),
        quote!(optional = yes),
    ] {
        let e = errors(Kind::Delete, args.clone(), pod_handler());
        assert_eq!(e.len(), 1, "{args}: {e:?}");
        assert!(e[0].contains("expected `true` or `false`"), "{args}: {e:?}");
    }
}

#[test]
fn options_of_daemons_and_timers_are_named_on_change_handlers() {
    let rejected = [
        (quote!(interval = "1m"), "`interval` is a `#[timer]` option"),
        (quote!(sharp), "`sharp` is a `#[timer]` option"),
        (quote!(idle = "1m"), "`idle` is a `#[timer]` option"),
        (quote!(jitter = "1s"), "`jitter` is a `#[timer]` option"),
        (quote!(once), "`once` is a `#[timer]` option"),
        (quote!(cron = "@daily"), "`cron` is a `#[timer]` option"),
        (quote!(tz = "UTC"), "`tz` is a `#[timer]` option"),
        (quote!(missed = "skip"), "`missed` is a `#[timer]` option"),
        (
            quote!(cancellation_polling = "1s"),
            "`cancellation_polling` is a `#[daemon]` option: change handlers",
        ),
        (
            quote!(initial_delay = "1s"),
            "`initial_delay` is a `#[daemon]` and `#[timer]` option",
        ),
        (quote!(finalizer = true), "`finalizer` does not apply"),
        (
            quote!(slack = "10ms"),
            "`slack` is a `#[daemon]` and `#[timer]` option",
        ),
    ];
    for kind in CHANGE_KINDS {
        for (args, expected) in &rejected {
            let e = errors(kind, args.clone(), pod_handler());
            assert_eq!(e.len(), 1, "{kind:?} {args}: {e:?}");
            assert!(e[0].contains(expected), "{kind:?} {args}: {e:?}");
            assert!(e[0].contains(kind.attr()) || !expected.contains("apply"));
        }
    }
    let e = errors(Kind::Delete, quote!(finalizer = false), pod_handler());
    assert!(e[0].contains("write `optional = true`"), "{e:?}");
    let e = errors(Kind::Update, quote!(finalizer = false), pod_handler());
    assert!(e[0].contains("never holds the object's finalizer"), "{e:?}");
}

#[test]
fn update_field_is_watched() {
    let m = build(Kind::Update, quote!(field = "spec.size"), pod_handler()).unwrap();
    let watch = m.watch.expect("a watched field");
    assert_eq!(
        (watch.path.as_str(), watch.segments.len()),
        ("spec.size", 2)
    );
    assert!(m.field.is_none(), "a watched field alone is no filter");
    let m = build(
        Kind::Update,
        quote!(field = "spec.mode", value = "fast"),
        pod_handler(),
    )
    .unwrap();
    assert!(m.watch.is_some());
    assert_eq!(m.field.expect("the value filter").path, "spec.mode");
    for kind in [Kind::Create, Kind::Delete, Kind::Resume, Kind::Daemon] {
        let m = build(kind, quote!(field = "spec.size"), pod_handler()).unwrap();
        assert!(m.watch.is_none() && m.field.is_some(), "{kind:?}");
    }
    let e = errors(Kind::Update, quote!(field = "spec."), pod_handler());
    assert!(e[0].contains("not a field path"), "{e:?}");
}

#[test]
fn update_only_parameters() {
    let with = |params: TokenStream| quote!(async fn f(pod: Arc<Pod>, #params) {});
    // Accepted where they make sense.
    for (args, params) in [
        (
            quote!(field = "spec.x"),
            quote!(c: FieldChange<u32>, o: Old<Pod>, d: Diff),
        ),
        (
            quote!(),
            quote!(o: kopf_runtime::Old<Pod>, d: kopf_runtime::Diff),
        ),
    ] {
        build(Kind::Update, args, with(params)).unwrap();
    }
    let cases: [(Kind, TokenStream, TokenStream, &str); 7] = [
        (
            Kind::Update,
            quote!(),
            quote!(c: FieldChange<u32>),
            "this handler watches none: write `#[on_update(field",
        ),
        (
            Kind::Create,
            quote!(field = "spec.x"),
            quote!(c: FieldChange<u32>),
            "`#[on_create]` has no old value",
        ),
        (
            Kind::Daemon,
            quote!(),
            quote!(c: kopf_runtime::FieldChange<u32>),
            "only given to `#[on_update(field",
        ),
        (
            Kind::Create,
            quote!(),
            quote!(o: Old<Pod>),
            "`#[on_create]` has no old object",
        ),
        (
            Kind::Timer,
            quote!(once),
            quote!(o: Old<Pod>),
            "`Old` is only given to `#[on_update]`",
        ),
        (
            Kind::Delete,
            quote!(),
            quote!(d: Diff),
            "`#[on_delete]` has no diff",
        ),
        (
            Kind::Resume,
            quote!(),
            quote!(d: Diff),
            "`Diff` is only given to `#[on_update]`",
        ),
    ];
    for (kind, args, params, expected) in cases {
        let e = errors(kind, args, with(params.clone()));
        assert_eq!(e.len(), 1, "{kind:?} {params}: {e:?}");
        assert!(e[0].contains(expected), "{kind:?} {params}: {e:?}");
    }
}

#[test]
fn change_handler_errors_come_together() {
    // Options of other kinds are reported together (before the options are checked further).
    let e = errors(
        Kind::Create,
        quote!(interval = "1m", finalizer = false, optional),
        pod_handler(),
    );
    assert_eq!(e.len(), 3, "{e:?}");
    // The checks of the options and parameters, together.
    let e = errors(
        Kind::Create,
        quote!(retries = 0, timeout = "0s", field = "spec..x"),
        quote!(
            async fn f(pod: Arc<Pod>, old: Old<Pod>, diff: Diff, c: FieldChange<u8>) {}
        ),
    );
    assert_eq!(e.len(), 6, "{e:?}");
}

#[test]
fn change_codegen() {
    let out = expand(Kind::Update, quote!(field = "spec.size"), pod_handler()).to_string();
    for expected in [
        ":: kopf_runtime :: engine :: HandlerKind :: Update",
        "change : :: kopf_runtime :: engine :: ChangeOptions :: watching \
         (:: kopf_runtime :: engine :: WatchedField { path : \"spec.size\" , segments : & \
         [\"spec\" , \"size\"] , })",
        "field : :: core :: option :: Option :: None",
        ":: kopf_runtime :: __private :: HandlerReturn :: < :: kopf_runtime :: __private :: \
         ChangeHandlerKind >",
        "finalizer : false",
    ] {
        assert!(out.contains(expected), "{expected} in {out}");
    }
    for (kind, variant) in [
        (Kind::Create, "Create"),
        (Kind::Delete, "Delete"),
        (Kind::Resume, "Resume"),
    ] {
        let out = expand(kind, quote!(), pod_handler()).to_string();
        let expected = format!(":: kopf_runtime :: engine :: HandlerKind :: {variant}");
        assert!(out.contains(&expected), "{expected} in {out}");
        assert!(
            out.contains("change : :: kopf_runtime :: engine :: ChangeOptions :: NONE"),
            "{out}"
        );
        assert!(out.contains(":: ChangeHandlerKind >"), "{out}");
        let finalizer = format!("finalizer : {}", kind == Kind::Delete);
        assert!(out.contains(&finalizer), "{finalizer} in {out}");
    }
    let out = expand(Kind::Delete, quote!(optional), pod_handler()).to_string();
    assert!(out.contains("finalizer : false"), "{out}");
}

#[test]
fn a_field_change_parameter_names_its_type_for_the_schema_check() {
    let handler = quote!(
        async fn handle(pod: Arc<Pod>, c: kopf_runtime::FieldChange<Option<std::string::String>>) {}
    );
    let out = expand(Kind::Update, quote!(field = "spec.size"), handler).to_string();
    for expected in [
        ". decoded_as (:: kopf_runtime :: engine :: FieldType { name : \
         \"Option<std::string::String>\" ,",
        "decode : :: kopf_runtime :: __private :: decode_probe :: < Option < std :: string :: \
         String > > ,",
    ] {
        assert!(out.contains(expected), "{expected} in {out}");
    }
    // Without a `FieldChange`, there is no type to check.
    let out = expand(Kind::Update, quote!(field = "spec.size"), pod_handler()).to_string();
    assert!(!out.contains("decoded_as"), "{out}");
}
