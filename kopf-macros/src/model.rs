//! The validated handler model: what stage 2 ([`crate::validate`]) builds and the only input of
//! stage 3 ([`crate::codegen`]). Pure data: the types below say what a handler is once every
//! option has been checked on its own and against the others. Nothing here refers to the
//! attribute's tokens as written, and this file imports no stage (only [`crate::kind`]).

use std::time::Duration;

use syn::{Expr, Ident, Type};

use crate::kind::Kind;

/// Everything code generation needs, validated.
#[derive(Debug, Clone)]
pub(crate) struct HandlerModel {
    pub(crate) kind: Kind,
    pub(crate) krate: syn::Path,
    pub(crate) id: String,
    pub(crate) function: Function,
    pub(crate) resource: Resource,
    pub(crate) errors: ErrorsMode,
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
    /// Daemons and timers: how late a wake-up may come, to share it with others.
    pub(crate) slack: Option<Duration>,
    pub(crate) schedule: Schedule,
    pub(crate) labels: Vec<(String, MetaFilter)>,
    pub(crate) annotations: Vec<(String, MetaFilter)>,
    /// The filter on a field (on `#[on_update(field = ...)]`, only with a `value`).
    pub(crate) field: Option<Field>,
    /// `#[on_update(field = ...)]`: the field whose change calls the handler.
    pub(crate) watch: Option<Watched>,
    /// `when`: a path to a `fn(&K) -> bool` (or a non-capturing closure).
    pub(crate) when: Option<Expr>,
    /// `#[reconcile]`'s own options (`None` for the other kinds).
    pub(crate) reconcile: Option<Reconcile>,
}

/// `#[reconcile]`'s own options, checked.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reconcile {
    /// `owns(...)`: the child types.
    pub(crate) owns: Vec<Type>,
    /// `watches(...)`: each related type with its map function.
    pub(crate) watches: Vec<(Type, Expr)>,
    pub(crate) backoff_max: Option<Duration>,
    pub(crate) debounce: Option<Duration>,
    /// `cleanup`: a path to an `async fn` (or a non-capturing closure).
    pub(crate) cleanup: Option<Expr>,
}

/// The handler function, as the generated code calls it.
#[derive(Debug, Clone)]
pub(crate) struct Function {
    pub(crate) ident: Ident,
    pub(crate) is_async: bool,
    /// Every parameter's type, in order (injected by type).
    pub(crate) params: Vec<Type>,
    /// The declared return type (`None`: `()`).
    pub(crate) output: Option<Type>,
}

/// What a handler's error means unless it says otherwise (`errors = "..."`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorsMode {
    Temporary,
    Permanent,
    Ignored,
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
    /// A path to a `fn(&K) -> Duration` (or a non-capturing closure).
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
    pub(crate) missed: Missed,
}

/// What a cron timer does about the occurrences it missed while no operator ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missed {
    Skip,
    RunOnce,
}

/// The condition on one label or annotation key.
#[derive(Debug, Clone)]
pub(crate) enum MetaFilter {
    Equals(String),
    Present,
    Absent,
    /// A path to a `fn(Option<&str>) -> bool` (or a non-capturing closure).
    Predicate(Expr),
}

/// `field = "a.b"` with its condition (`present` when no `value` is given).
#[derive(Debug, Clone)]
pub(crate) struct Field {
    pub(crate) path: String,
    pub(crate) segments: Vec<String>,
    pub(crate) value: ValueFilter,
}

/// The condition on a field's value.
#[derive(Debug, Clone)]
pub(crate) enum ValueFilter {
    Equals(JsonLiteral),
    Present,
    Absent,
    /// A path to a `fn(Option<&serde_json::Value>) -> bool` (or a non-capturing closure).
    Predicate(Expr),
}

/// A JSON literal a field's value is compared with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum JsonLiteral {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// `#[on_update(field = "a.b")]`: the field whose change calls the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Watched {
    pub(crate) path: String,
    pub(crate) segments: Vec<String>,
    /// The `T` of the handler's `FieldChange<T>` parameter, if it takes one.
    pub(crate) value_type: Option<syn::Type>,
}

/// A validated `#[index]`: the function, the resource it indexes and what it returns.
#[derive(Debug)]
pub(crate) struct IndexModel {
    /// The path of kopf-runtime in the generated code.
    pub(crate) krate: syn::Path,
    /// The function's name: the index's name, and the type `Index<...>` names.
    pub(crate) name: syn::Ident,
    /// The function's visibility, given to that type.
    pub(crate) vis: syn::Visibility,
    /// `K` of the `Arc<K>` parameter.
    pub(crate) resource: syn::Type,
    /// The return type: a collection of `(key, value)` pairs.
    pub(crate) pairs: syn::Type,
    /// Conditions on the objects' labels.
    pub(crate) labels: Vec<(String, MetaFilter)>,
    /// Conditions on the objects' annotations.
    pub(crate) annotations: Vec<(String, MetaFilter)>,
    /// `when`: a path to a `fn(&K) -> bool` (or a non-capturing closure).
    pub(crate) when: Option<Expr>,
}

/// Which attribute made an admission handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdmissionKind {
    /// `#[validate]`
    Validate,
    /// `#[mutate]`
    Mutate,
}

/// How an admission handler takes one of its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdmissionParam {
    /// `Arc<K>`: the object (validating handlers).
    Arc,
    /// `&K`: the object (validating handlers).
    Ref,
    /// `&mut K`: the object to change (mutating handlers).
    RefMut,
    /// `Review<K>`: the operation, the old object, the user, the dry-run flag.
    Review,
    /// `Connect<K>`: a connection to a subresource (validating handlers of `connect`).
    Connect,
}

/// A checked `#[validate]` or `#[mutate]` function.
#[derive(Debug, Clone)]
pub(crate) struct AdmissionModel {
    /// The path of kopf-runtime in the generated code.
    pub(crate) krate: syn::Path,
    /// Validating or mutating.
    pub(crate) kind: AdmissionKind,
    /// The function's name.
    pub(crate) name: syn::Ident,
    /// The handler's id (its path on the webhook server, its webhook's name).
    pub(crate) id: String,
    /// `K`: the object's type.
    pub(crate) resource: syn::Type,
    /// The parameters, in order.
    pub(crate) params: Vec<AdmissionParam>,
    /// Whether the function is `async`.
    pub(crate) is_async: bool,
    /// The return type, where a wrong one is reported (`None`: `()`).
    pub(crate) output: Option<syn::Type>,
    /// `Create`, `Update`, `Delete`, or only `Connect`: the variants of `Operation`.
    pub(crate) operations: Vec<syn::Ident>,
    /// The subresources a `connect` handler is asked about (`exec`, …; empty otherwise).
    pub(crate) subresources: Vec<String>,
    /// Whether the API server admits what the handler cannot answer (failure policy `Ignore`).
    pub(crate) ignore_failures: bool,
    /// The time to answer, in whole seconds (1–30).
    pub(crate) timeout_seconds: u8,
    /// Conditions on the object's labels.
    pub(crate) labels: Vec<(String, MetaFilter)>,
    /// Conditions on the object's annotations.
    pub(crate) annotations: Vec<(String, MetaFilter)>,
    /// `when`: a path to a `fn(&K) -> bool` (or a non-capturing closure).
    pub(crate) when: Option<Expr>,
}
