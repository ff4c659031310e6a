//! [`WebhookRegistration`]: one `#[validate]` or `#[mutate]` handler, as `inventory` collects
//! it and the webhook server dispatches to it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::request::{Request, Verdict};
use super::review::Operation;
use crate::core::filter::Filters;
use crate::core::resource::ResourceInfo;
use crate::handler::resource::StaticResource;

/// A handler's answer, still to come.
pub type Pending = Pin<Box<dyn Future<Output = Verdict> + Send>>;

/// Which admission phase a handler takes part in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WebhookKind {
    /// `#[validate]`: admits or refuses, changes nothing.
    Validating,
    /// `#[mutate]`: may change the object, then admits or refuses.
    Mutating,
}

impl WebhookKind {
    /// `validate` or `mutate`: the first segment of the handler's path on the server.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Validating => "validate",
            Self::Mutating => "mutate",
        }
    }
}

/// One admission handler (`inventory` collects them; the attributes generate them).
#[derive(Clone, Copy)]
pub struct WebhookRegistration {
    id: &'static str,
    kind: WebhookKind,
    operations: &'static [Operation],
    subresources: &'static [&'static str],
    resource: fn() -> ResourceInfo,
    call: fn(Request) -> Pending,
    ignore_failures: bool,
    timeout_seconds: u8,
    filters: Filters,
}

inventory::collect!(WebhookRegistration);

impl WebhookRegistration {
    /// A handler of `K`'s `operations` under the name `id`. It admits nothing if it cannot
    /// answer (the failure policy `Fail`), within 10 s.
    ///
    /// ```
    /// use kopf_runtime::admission::{Pending, Request, Verdict, WebhookKind, WebhookRegistration};
    /// use kopf_runtime::Operation;
    /// # use kopf_runtime::{ResourceInfo, StaticResource};
    /// # #[derive(serde::Deserialize)] struct Pod {}
    /// # impl StaticResource for Pod {
    /// #     fn resource_info() -> ResourceInfo { ResourceInfo::new("", "v1", "Pod", "pods", true) }
    /// # }
    /// fn allow(_: Request) -> Pending {
    ///     Box::pin(async { Verdict::allow() })
    /// }
    /// static CHECK: WebhookRegistration = WebhookRegistration::new::<Pod>(
    ///     "check", WebhookKind::Validating, &[Operation::Create], allow,
    /// );
    /// assert_eq!(CHECK.path(), "/validate/check");
    /// ```
    #[must_use]
    pub const fn new<K: StaticResource>(
        id: &'static str,
        kind: WebhookKind,
        operations: &'static [Operation],
        call: fn(Request) -> Pending,
    ) -> Self {
        Self {
            id,
            kind,
            operations,
            subresources: &[],
            resource: K::resource_info,
            call,
            ignore_failures: false,
            timeout_seconds: 10,
            filters: Filters {
                labels: &[],
                annotations: &[],
                field: None,
            },
        }
    }

    /// The same, called only for objects whose labels and annotations match `filters` (others
    /// are admitted unasked; the label conditions also narrow the webhook's `objectSelector`).
    #[must_use]
    pub const fn filters(mut self, filters: Filters) -> Self {
        self.filters = filters;
        self
    }

    /// The same, for requests to these subresources of the kind (`exec`, `attach`,
    /// `portforward`, `proxy`) instead of the kind itself: `CONNECT` requests.
    #[must_use]
    pub const fn subresources(mut self, subresources: &'static [&'static str]) -> Self {
        self.subresources = subresources;
        self
    }

    /// The same, admitting requests when it cannot answer (failure policy `Ignore`).
    #[must_use]
    pub const fn ignore_failures(mut self) -> Self {
        self.ignore_failures = true;
        self
    }

    /// The same, with this time to answer in seconds (1–30, as the API server allows).
    #[must_use]
    pub const fn timeout_seconds(mut self, seconds: u8) -> Self {
        self.timeout_seconds = if seconds < 1 {
            1
        } else if seconds > 30 {
            30
        } else {
            seconds
        };
        self
    }

    /// The handler's name.
    #[must_use]
    pub fn id(&self) -> &'static str {
        self.id
    }

    /// Validating or mutating.
    #[must_use]
    pub fn kind(&self) -> WebhookKind {
        self.kind
    }

    /// The operations it is called for.
    #[must_use]
    pub fn operations(&self) -> &'static [Operation] {
        self.operations
    }

    /// The subresources it is called for (empty: the kind itself).
    #[must_use]
    pub fn subresource_names(&self) -> &'static [&'static str] {
        self.subresources
    }

    /// The resource it is called for.
    #[must_use]
    pub fn resource(&self) -> ResourceInfo {
        (self.resource)()
    }

    /// Whether the API server admits requests the handler could not answer.
    #[must_use]
    pub fn ignores_failures(&self) -> bool {
        self.ignore_failures
    }

    /// How long the API server waits for the answer.
    #[must_use]
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.timeout_seconds))
    }

    /// The label and annotation conditions on the objects it is called for.
    #[must_use]
    pub fn object_filters(&self) -> &Filters {
        &self.filters
    }

    /// Its path on the webhook server: `/<validate|mutate>/<id>`.
    #[must_use]
    pub fn path(&self) -> String {
        format!("/{}/{}", self.kind.as_str(), self.id)
    }

    /// Calls the handler.
    #[must_use]
    pub fn call(&self, request: Request) -> Pending {
        (self.call)(request)
    }
}

impl fmt::Debug for WebhookRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookRegistration")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("operations", &self.operations)
            .field("subresources", &self.subresources)
            .field("ignore_failures", &self.ignore_failures)
            .field("timeout_seconds", &self.timeout_seconds)
            .finish_non_exhaustive()
    }
}
