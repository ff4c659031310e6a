//! # kopf-runtime
//!
//! A Kubernetes operator framework centred on per-resource **daemons** and **timers**, in the
//! spirit of Python's [kopf](https://kopf.readthedocs.io).
//!
//! - A **daemon** ([`#[daemon]`](daemon)) is a long-running task per matching object: it starts
//!   when the object appears (or when the operator starts), and is asked to stop — through its
//!   [`Stopper`] — when the object is deleted, stops matching the handler's filters, or the
//!   operator exits. A finalizer holds the object's deletion until its daemons are gone.
//! - A **timer** ([`#[timer]`](timer)) is a function called per matching object on a schedule
//!   (`interval`, `sharp`, `idle`, `initial_delay`, `jitter`, `once`, or a `cron` expression
//!   with `tz` and `missed`), never overlapping itself; its return value is stored under
//!   `status.<handler id>`.
//! - **Change handlers** ([`#[on_create]`](on_create), [`#[on_update]`](on_update),
//!   [`#[on_delete]`](on_delete), [`#[on_resume]`](on_resume)) run once per change of an
//!   object, as kopf's, with their progress kept on the object.
//! - A **reconcile handler** ([`#[reconcile]`](reconcile)) runs per object whenever it, its
//!   owned children or related objects change, or its requeue is due, and returns an
//!   [`Action`].
//!
//! All are plain functions whose parameters are injected by type, in any order: the object,
//! its stop flag, a [`Patch`], the `kube::Client`, your shared [`Data`], ... The attributes check
//! the options and the signature at compile time and register the function; an [`Operator`]
//! started in `main` watches the resources and runs every registered handler.
//!
//! # Quick start
//!
//! The dependencies (kopf-rs is not on crates.io yet):
//!
//! ```toml
//! [dependencies]
//! kopf-runtime = { git = "https://github.com/kopf-rs/kopf-rs" }
//! kube = { version = "5", default-features = false, features = [
//!     "client", "rustls-tls", "ring", "runtime", "derive",
//! ] }
//! k8s-openapi = { version = "0.29", features = ["latest", "schemars"] }
//! schemars = "1"
//! serde = { version = "1", features = ["derive"] }
//! serde_json = "1"
//! tokio = { version = "1", features = ["rt-multi-thread", "macros", "time"] }
//! tracing = "0.1"
//! ```
//!
//! The binary picks kube's TLS stack (here `rustls-tls` with `ring`; or `aws-lc-rs`, or
//! `openssl-tls`): kopf-runtime depends on kube without one, and without `derive`.
//!
//! # Features
//!
//! On by default; turn off what you bring yourself (`default-features = false`):
//!
//! - `server`: the probe and metrics server, [`OperatorBuilder::health_addr`] (`/healthz`,
//!   `/readyz`, `/metrics`). Without it, serve [`Operator::is_alive`], [`Operator::is_ready`]
//!   and [`Operator::metrics_registry`] from your own server.
//! - `logging`: [`init_logging`] and [`OperatorBuilder::log_format`] (a tracing-subscriber
//!   subscriber). Without it, install your own subscriber.
//! - `cli`: [`OperatorArgs`], the command line (clap); turns on `server` and `logging`.
//!
//! Off by default: `testing`, the `testing` module (handlers on simulated objects).
//!
//! A custom resource, a daemon, a timer and `main`. With a cluster in `KUBECONFIG` and the CRD
//! installed (`Backup::crd()`, from `kube::CustomResourceExt`, generates it), `cargo run` runs
//! them:
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use kopf_runtime::prelude::*;
//! use kopf_runtime::{LogFormat, SchemalessStatus, init_logging};
//! use kube::CustomResource;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! /// The resource: `Backup` objects of `example.com/v1`. Handlers store their results under
//! /// `status.<handler id>`, which `SchemalessStatus` keeps whole.
//! #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
//! #[kube(group = "example.com", version = "v1", kind = "Backup", namespaced)]
//! #[kube(status = "SchemalessStatus")]
//! pub struct BackupSpec {
//!     pub bucket: String,
//! }
//!
//! /// A daemon: one per `Backup`, for as long as the object exists.
//! #[daemon(cancellation_timeout = "10s")]
//! async fn watch_bucket(backup: Arc<Backup>, stopper: Stopper) -> HandlerResult {
//!     // `sleep` returns true as soon as the daemon is asked to stop.
//!     while !stopper.sleep(Duration::from_secs(5)).await {
//!         tracing::info!(bucket = %backup.spec.bucket, "still there");
//!     }
//!     tracing::info!(reason = %stopper.reason(), "stopping");
//!     Ok(())
//! }
//!
//! /// A timer: every 30 s per `Backup`, once the object has been unchanged for a minute. The
//! /// value is stored under `status.summarize`.
//! #[timer(interval = "30s", idle = "1m")]
//! async fn summarize(backup: Arc<Backup>) -> HandlerResult<serde_json::Value> {
//!     Ok(serde_json::json!({ "bucket": backup.spec.bucket }))
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     init_logging(LogFormat::Human)?;
//!     // Every #[daemon] and #[timer] of the binary, until SIGINT/SIGTERM; then a graceful stop.
//!     Operator::builder().run().await?;
//!     Ok(())
//! }
//! ```
//!
//! Handlers are functions: a test can call them without a cluster.
//!
//! ```
//! # use std::collections::BTreeMap;
//! # use std::sync::Arc;
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # use kopf_runtime::prelude::*;
//! /// Every minute per ConfigMap: how many keys it has, under `status.count_keys`.
//! #[timer(interval = "1m")]
//! async fn count_keys(cm: Arc<ConfigMap>) -> HandlerResult<usize> {
//!     Ok(cm.data.as_ref().map_or(0, |data| data.len()))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let data = BTreeMap::from([("a".to_owned(), "1".to_owned())]);
//! let cm = ConfigMap { data: Some(data), ..ConfigMap::default() };
//! assert_eq!(count_keys(Arc::new(cm)).await.unwrap(), 1);
//! # }
//! ```
//!
//! # What is where
//!
//! The crate root has what handler authors and `main` use; everything else is in a module.
//!
//! - **Attributes**: [`daemon`], [`timer`], the change handlers [`on_create`],
//!   [`on_update`], [`on_delete`] and [`on_resume`], and [`reconcile`]; [`index`] for an
//!   index of a kind's objects ([`IndexDef`] is what it implements); [`validate`] and
//!   [`mutate`] for admission handlers.
//! - **Admission**: what admission handlers take and return — [`Review`] with its
//!   [`Operation`], [`Connect`] with its [`ConnectOptions`], [`Rejection`], [`Warnings`],
//!   [`AdmissionReturn`]; the [`admission`] module has the rest (the registration and the
//!   request the server dispatches); with the `webhook` feature, [`Webhooks`], the server's
//!   settings, and [`WebhookError`].
//! - **Injectable parameters**: [`Stopper`] with its [`StopReason`]; [`Patch`] (its writes fail
//!   with a [`PatchError`]); [`Live`], [`Data`], [`Memo`], [`Events`] (failing with an
//!   [`EventError`]), [`ObjectRef`], [`Retry`], [`Started`], [`Runtime`], a cron timer's
//!   [`Occurrence`]; a change handler's [`Old`] object, [`FieldChange`]s and [`Diff`] (of
//!   [`DiffItem`]s, each with a [`DiffOp`]); [`Children`], which applies an object's owned
//!   children (failing with a [`ChildError`]); an [`Index`] to look objects up by key.
//!   [`Inject`] and [`BlockingSafe`] make your own
//!   types injectable.
//! - **Results and errors**: [`HandlerResult`], [`HandlerError`] with its [`ErrorKind`], and
//!   [`BoxError`], the cause it boxes; [`Action`], what a reconcile handler asks for next.
//! - **Resources**: [`StaticResource`] (with its [`ScopeKind`]), [`ResourceInfo`], and
//!   [`SchemalessStatus`] for a custom resource's status.
//! - **The handler set**: [`Registry`], and [`RegistryError`] when it cannot be used.
//! - **Running the operator**: [`Operator`], [`OperatorBuilder`] and [`OperatorError`]; with
//!   the `cli` feature [`OperatorArgs`], with `logging` [`init_logging`], [`LogFormat`] and
//!   [`LoggingError`]; [`prometheus_client`], for your own metrics on `/metrics`.
//! - **[`prelude`]**: the names nearly every operator file uses, for
//!   `use kopf_runtime::prelude::*;`.
//! - **[`ha`]**: several replicas — leader election and sharding settings, what a replica
//!   reports of them, the hash ranges, the error of a write a standby refuses.
//! - **[`stats`]**: the snapshots [`Operator::stats`] returns.
//! - **[`engine`]**: the Kubernetes-free engine underneath — handler specs, the type-erased
//!   handler interface, and the [`Supervisor`](engine::Supervisor) that runs every handler.
//!   For driving the supervisor without Kubernetes, writing a handler without the attributes,
//!   or testing filters against JSON objects.
//! - **`testing`** (the `testing` feature): handlers run on simulated objects, and a live
//!   operator in a test.
//!
//! # Guides
//!
//! The user guide lives in the repository's `docs/` ([index]); its Rust blocks are compiled
//! against this crate.
//!
//! - [Quick start], [daemons], [timers], [reconcile handlers][reconcile], [handlers]
//!   (signatures, injectable parameters, every option), [filters], [patches and
//!   results][patches], [errors and retries][errors], [finalizers and deletion][finalizers],
//!   [shutdown], [events and logging][events-and-logging], [admission webhooks][webhooks].
//! - [Testing your operator][testing], [deploying] (RBAC, probes), [operations],
//!   [reliability] (what happens when the API server misbehaves), [high availability]
//!   (several replicas, leader election, fencing).
//! - [Coming from kopf][coming-from-kopf], and the [architecture] (crates and data flow).
//!
//! [index]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/README.md
//! [Quick start]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/quickstart.md
//! [daemons]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/daemons.md
//! [timers]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/timers.md
//! [reconcile]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/reconcile.md
//! [handlers]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/handlers.md
//! [filters]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/filters.md
//! [patches]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/patches.md
//! [errors]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/errors.md
//! [finalizers]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/finalizers.md
//! [shutdown]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/shutdown.md
//! [events-and-logging]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/events-and-logging.md
//! [webhooks]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/webhooks.md
//! [testing]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/testing.md
//! [deploying]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/deploying.md
//! [operations]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/operations.md
//! [reliability]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/reliability.md
//! [high availability]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/high-availability.md
//! [coming-from-kopf]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/coming-from-kopf.md
//! [architecture]: https://github.com/kopf-rs/kopf-rs/blob/main/docs/architecture.md
#![doc(test(attr(deny(warnings))))]
#![forbid(unsafe_code)]

mod core;
pub use crate::handler::admission;
pub mod engine;
pub mod ha;
mod handler;
mod operator;
pub mod stats;
#[cfg(feature = "testing")]
pub mod testing;

pub use crate::core::diff::{Diff, DiffItem, DiffOp};
pub use crate::core::object::ObjectRef;
pub use crate::core::outcome::{BoxError, ErrorKind, HandlerError, HandlerResult};
pub use crate::core::reconcile::action::Action;
pub use crate::core::resource::ResourceInfo;
pub use crate::core::sink::PatchError;
pub use crate::core::stop::{StopReason, Stopper};
pub use crate::handler::admission::{
    AdmissionReturn, Connect, ConnectOptions, Operation, Rejection, Review, Warnings,
};
pub use crate::handler::{
    BlockingSafe, Data, FieldChange, Inject, Live, Memo, Occurrence, Old, Patch, Registry,
    RegistryError, Retry, Runtime, SchemalessStatus, ScopeKind, Started, StaticResource,
};
pub use crate::handler::{ChildError, Children, Index, IndexDef};
#[cfg(feature = "cli")]
pub use crate::operator::OperatorArgs;
pub use crate::operator::{EventError, Events, Operator, OperatorBuilder, OperatorError};
#[cfg(feature = "logging")]
pub use crate::operator::{LogFormat, LoggingError, init_logging};
#[cfg(feature = "webhook")]
pub use crate::operator::{WebhookError, Webhooks};
pub use kopf_macros::{
    daemon, index, mutate, on_create, on_delete, on_resume, on_update, reconcile, timer, validate,
};
/// The official Prometheus client, whose registry the operator's `/metrics` serves: register
/// your own metrics into a [`Registry`](prometheus_client::registry::Registry) and give it to
/// [`OperatorBuilder::metrics_registry`] (re-exported so that its version is the operator's).
///
/// ```
/// use kopf_runtime::prometheus_client::metrics::gauge::Gauge;
/// let queue_depth: Gauge = Gauge::default();
/// queue_depth.set(3);
/// ```
pub use prometheus_client;

/// The names nearly every operator file uses: `use kopf_runtime::prelude::*;`.
///
/// - the attributes [`daemon`], [`timer`], [`on_create`], [`on_update`], [`on_delete`],
///   [`on_resume`] and [`reconcile`], with the [`Action`] a reconcile handler returns and the
///   [`Children`] it applies;
/// - [`Operator`], to run the handlers from `main`;
/// - the parameters most handlers take: [`Stopper`], [`Patch`], [`Live`], [`Data`],
///   [`Memo`], [`Retry`] and [`Events`], and the change handlers' [`FieldChange`] and [`Old`];
/// - [`HandlerResult`] and [`HandlerError`], for what handlers return.
///
/// Everything else is imported by name from the crate root (e.g. [`ObjectRef`], [`StopReason`],
/// [`Registry`], and [`Started`] and [`Runtime`], whose names are too common to import with a
/// glob), or from its modules ([`ha`], [`stats`], [`engine`]).
///
/// ```
/// use std::sync::Arc;
///
/// use k8s_openapi::api::core::v1::Pod;
/// use kopf_runtime::prelude::*;
///
/// #[daemon]
/// async fn watch_pod(pod: Arc<Pod>, stopper: Stopper, patch: Patch) -> HandlerResult {
///     stopper.stopped().await;
///     patch.status("last_seen", pod.metadata.name.clone());
///     Ok(())
/// }
/// ```
pub mod prelude {
    pub use crate::{
        Action, Children, Data, Events, FieldChange, HandlerError, HandlerResult, Live, Memo, Old,
        Operator, Patch, Retry, Stopper, daemon, on_create, on_delete, on_resume, on_update,
        reconcile, timer,
    };
}

/// Items the code generated by `#[daemon]` and `#[timer]` refers to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::handler::{
        ChangeHandlerKind, CleanupFn, DaemonKind, HandlerReturn, PreparedCall, ReconcileReturn,
        TimerKind, assert_blocking_safe, decode_probe, kind_ref, map_related, start_cleanup,
    };
    pub use crate::handler::{IndexPair, index_pairs};

    /// What `#[validate]` and `#[mutate]` generate code against.
    pub mod admission {
        pub use crate::handler::admission::{mutated, snapshot, validated};
    }
    pub use inventory;
    pub use kube::api::DynamicObject;
    pub use serde_json;

    /// The children's and related objects' watches, until the operator starts them itself
    /// for reconcile handlers (the integration tests drive them directly).
    pub mod children {
        pub use crate::handler::Echoes;
        pub use crate::operator::children::{
            ChildCause, ChildWatch, NamedTrigger, OwnerKind, OwnerTrigger, RelatedMap,
            RelatedWatch, Via, watch_children, watch_related,
        };
    }
}

#[cfg(test)]
mod front_page_tests;
