//! The builder's setter for indexes kept beside handlers given by hand.

use super::OperatorBuilder;
use crate::handler::{IndexDef, IndexRegistration};

impl OperatorBuilder {
    /// Keeps the index `I` current and injectable (`Index<I>`). Needed only when the handlers
    /// are given ([`handler`](Self::handler), [`registry`](Self::registry)): otherwise every
    /// `#[index]` of the binary is kept.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// /// ConfigMaps by their `app` label.
    /// #[kopf_runtime::index]
    /// fn by_app(config: Arc<ConfigMap>) -> Option<(String, String)> {
    ///     let app = config.metadata.labels.as_ref()?.get("app")?.clone();
    ///     Some((app, config.metadata.name.clone()?))
    /// }
    ///
    /// let builder = kopf_runtime::Operator::builder().index::<by_app>();
    /// # let _ = builder;
    /// ```
    pub fn index<I: IndexDef>(mut self) -> Self {
        self.options.indexes.push(IndexRegistration::new::<I>());
        self
    }
}
