//! Stage 2: the validated handler model, the only input of code generation. Every option has
//! been checked on its own and against the others; nothing here refers to raw attribute tokens.

use std::time::Duration;

use proc_macro2::Span;
use syn::{Expr, Type};

use crate::args::{ErrorsArg, MetaCondition, MissedArg, RawArgs, ValueArg};
use crate::signature::Signature;
use crate::{change, validate};

/// Which macro is expanding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Daemon,
    Timer,
    Create,
    Update,
    Delete,
    Resume,
}

impl Kind {
    pub(crate) fn attr(self) -> &'static str {
        match self {
            Self::Daemon => "#[daemon]",
            Self::Timer => "#[timer]",
            Self::Create => "#[on_create]",
            Self::Update => "#[on_update]",
            Self::Delete => "#[on_delete]",
            Self::Resume => "#[on_resume]",
        }
    }

    /// Whether this is a change handler (`#[on_create]`, `#[on_update]`, `#[on_delete]`,
    /// `#[on_resume]`): called once per change of the object rather than kept running.
    pub(crate) fn is_change(self) -> bool {
        !matches!(self, Self::Daemon | Self::Timer)
    }
}

/// Where the resource identity comes from.
#[derive(Debug, Clone)]
pub(crate) enum Resource {
    /// From the object type `K: kube::Resource<DynamicType = ()>`.
    Static { object: Type },
    /// Given in the attribute; objects decode into `object` (default `DynamicObject`).
    Dynamic {
        object: Option<Type>,
        group: String,
        version: String,
        kind: String,
        plural: String,
        namespaced: bool,
    },
}

/// `initial_delay`: fixed, or computed from the object.
#[derive(Debug, Clone)]
pub(crate) enum Delay {
    Fixed(Duration),
    Computed(Expr),
}

/// A timer's schedule (all empty for the other kinds). With `cron`, only `jitter` is set besides it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub(crate) interval: Option<Duration>,
    pub(crate) sharp: bool,
    pub(crate) idle: Option<Duration>,
    pub(crate) jitter: Option<Duration>,
    pub(crate) once: bool,
    pub(crate) cron: Option<Cron>,
}

/// A wall-clock schedule: an expression that parses as the runtime parses it, and a time zone
/// the runtime's bundled database knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cron {
    /// As written.
    pub(crate) expr: String,
    /// As written, or `"UTC"`.
    pub(crate) tz: String,
    pub(crate) missed: MissedArg,
}

/// `field = "a.b"` with its condition (`present` when no `value` is given).
#[derive(Debug, Clone)]
pub(crate) struct Field {
    pub(crate) path: String,
    pub(crate) segments: Vec<String>,
    pub(crate) value: ValueArg,
}

/// `#[on_update(field = "a.b")]`: the field whose change calls the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Watched {
    pub(crate) path: String,
    pub(crate) segments: Vec<String>,
}

/// Everything code generation needs, validated.
#[derive(Debug, Clone)]
pub(crate) struct HandlerModel {
    pub(crate) kind: Kind,
    pub(crate) krate: syn::Path,
    pub(crate) id: String,
    pub(crate) sig: Signature,
    pub(crate) resource: Resource,
    pub(crate) errors: ErrorsArg,
    pub(crate) backoff: Option<Duration>,
    pub(crate) retries: Option<u32>,
    pub(crate) retry_timeout: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) initial_delay: Option<Delay>,
    /// Daemons and timers: `finalizer` (default `true`); `#[on_delete]`: `!optional`; the other
    /// change handlers never hold it.
    pub(crate) finalizer: bool,
    pub(crate) cancellation_backoff: Option<Duration>,
    pub(crate) cancellation_timeout: Option<Duration>,
    pub(crate) cancellation_polling: Option<Duration>,
    pub(crate) schedule: Schedule,
    pub(crate) labels: Vec<(String, MetaCondition)>,
    pub(crate) annotations: Vec<(String, MetaCondition)>,
    /// The filter on a field (on `#[on_update(field = ...)]`, only with a `value`).
    pub(crate) field: Option<Field>,
    /// `#[on_update(field = ...)]`: the field whose change calls the handler.
    pub(crate) watch: Option<Watched>,
    pub(crate) when: Option<Expr>,
}

impl HandlerModel {
    /// Validates the options against each other and the signature; all errors together.
    /// `attr_span` is where "missing option" errors point (the attribute).
    pub(crate) fn build(
        kind: Kind,
        args: RawArgs,
        sig: Signature,
        attr_span: Span,
    ) -> darling::Result<Self> {
        let mut errors = darling::Error::accumulator();
        let id = errors.handle(validate::id(args.id.as_ref(), &sig.ident));
        let resource = errors.handle(validate::resource(&args, &sig));
        let schedule = errors.handle(validate::schedule(kind, &args, attr_span));
        let labels = errors.handle(validate::meta_filters(args.labels.as_ref(), true));
        let annotations = errors.handle(validate::meta_filters(args.annotations.as_ref(), false));
        let field = errors.handle(validate::field(args.field.as_ref(), args.value.as_ref()));
        errors.handle(change::params(kind, &sig, args.field.is_some()));
        errors.handle(validate::durations(&args));
        errors.handle(validate::retries(args.retries.as_ref()));
        errors.finish()?;
        let (
            Some(id),
            Some(resource),
            Some(schedule),
            Some(labels),
            Some(annotations),
            Some(field),
        ) = (id, resource, schedule, labels, annotations, field)
        else {
            // Each stage either succeeded or pushed an error, so this is not reached.
            return Err(darling::Error::custom(
                "kopf-macros: internal validation error",
            ));
        };
        let (field, watch) = change::watch(kind, field, args.value.is_some());
        let krate = args
            .krate
            .map_or_else(|| syn::parse_quote!(::kopf_runtime), |c| c.0);
        Ok(Self {
            kind,
            krate,
            id,
            sig,
            resource,
            errors: args.errors.map_or(ErrorsArg::Temporary, |e| *e),
            backoff: args.backoff.map(|d| d.value),
            retries: args.retries.map(|r| *r),
            retry_timeout: args.retry_timeout.map(|d| d.value),
            timeout: args.timeout.map(|d| d.value),
            initial_delay: args.initial_delay.map(|delay| match delay {
                crate::args::DelayArg::Fixed(d) => Delay::Fixed(d.value),
                crate::args::DelayArg::Computed(f) => Delay::Computed(f.0),
            }),
            finalizer: match kind {
                Kind::Daemon | Kind::Timer => args.finalizer.is_none_or(|f| *f),
                Kind::Delete => !args.optional.is_some_and(|o| o.0),
                Kind::Create | Kind::Update | Kind::Resume => false,
            },
            cancellation_backoff: args.cancellation_backoff.map(|d| d.value),
            cancellation_timeout: args.cancellation_timeout.map(|d| d.value),
            cancellation_polling: args.cancellation_polling.map(|d| d.value),
            schedule,
            labels,
            annotations,
            field,
            watch,
            when: args.when.map(|w| w.0),
        })
    }

    /// The type objects decode into.
    pub(crate) fn object_type(&self) -> Option<&Type> {
        match &self.resource {
            Resource::Static { object } => Some(object),
            Resource::Dynamic { object, .. } => object.as_ref(),
        }
    }
}
