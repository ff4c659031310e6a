//! The injectables of change handlers: [`Old`], [`FieldChange`] and [`Diff`].

use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::inject::{BlockingSafe, Inject};
use crate::core::diff::{ChangeContext, Diff};
use crate::core::erased::Invocation;
use crate::core::outcome::HandlerError;

/// The object as the operator last handled it, in an `#[on_update]` handler: `None` when this
/// process did not see it (after a restart or a handover, the stored diff base keeps a digest
/// and the watched fields, not the object).
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kopf_runtime::Old;
///
/// fn grew(old: &Old<ConfigMap>, new: &ConfigMap) -> bool {
///     let keys = |cm: &ConfigMap| cm.data.as_ref().map_or(0, |d| d.len());
///     old.0.as_deref().is_some_and(|old| keys(new) > keys(old))
/// }
/// assert!(!grew(&Old(None), &ConfigMap::default()));
/// ```
#[derive(Debug, Clone)]
pub struct Old<K>(pub Option<Arc<K>>);

impl<K> std::ops::Deref for Old<K> {
    type Target = Option<Arc<K>>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// The watched field's value before and after the change, in an
/// `#[on_update(field = "...")]` handler (`None`: absent or `null`). Always known, also after a
/// restart: the operator keeps the watched fields in the object's diff base.
///
/// ```
/// use kopf_runtime::FieldChange;
/// let change = FieldChange { old: Some(1_u32), new: Some(3), old_elided: false };
/// assert_eq!(change.new.unwrap() - change.old.unwrap(), 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FieldChange<T> {
    /// The value when the object was last handled.
    pub old: Option<T>,
    /// The value now.
    pub new: Option<T>,
    /// The old value was over 16 KiB, too large to keep in the diff base: `old` is `None`
    /// although the field was set.
    pub old_elided: bool,
}

fn change(invocation: &Invocation, what: &str) -> Result<Arc<ChangeContext>, HandlerError> {
    invocation.change.clone().ok_or_else(|| {
        HandlerError::permanent(format!(
            "only an `#[on_update]` handler has `{what}` (this invocation is for no change)"
        ))
    })
}

impl<K: DeserializeOwned + Send + Sync + 'static> Inject<K> for Old<K> {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        let context = change(invocation, "Old")?;
        let Some(old) = &context.old else {
            return Ok(Self(None));
        };
        old.decode::<K>().map(|k| Self(Some(k))).map_err(|e| {
            HandlerError::permanent(format!(
                "the old version of {} does not deserialize: {e}",
                old.reference()
            ))
        })
    }
}

impl<K, T: DeserializeOwned> Inject<K> for FieldChange<T> {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        let context = change(invocation, "FieldChange")?;
        let Some(field) = &context.field else {
            return Err(HandlerError::permanent(
                "only an `#[on_update(field = ...)]` handler has a `FieldChange`",
            ));
        };
        let decode = |value: &Option<serde_json::Value>| -> Result<Option<T>, HandlerError> {
            value
                .clone()
                .map(serde_json::from_value)
                .transpose()
                .map_err(|e| {
                    HandlerError::permanent(format!(
                        "the watched field of {} does not deserialize into `{}`: {e}",
                        invocation.object.reference(),
                        std::any::type_name::<T>()
                    ))
                })
        };
        Ok(Self {
            old: decode(&field.old)?,
            new: decode(&field.new)?,
            old_elided: field.old_elided,
        })
    }
}

impl<K> Inject<K> for Diff {
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        let context = change(invocation, "Diff")?;
        Ok(context.diff(&invocation.object.body_value()))
    }
}

/// Whether `value` decodes into `T`: the probe behind [`FieldType::decode`](crate::engine::FieldType)
/// that `#[on_update(field = ...)]` generates for a `FieldChange<T>`.
///
/// ```
/// use kopf_runtime::__private::decode_probe;
/// assert!(decode_probe::<u64>(&serde_json::json!(3)).is_ok());
/// assert!(decode_probe::<u64>(&serde_json::json!("3")).is_err());
/// ```
///
/// # Errors
/// The decoder's message when `value` does not decode into `T`.
pub fn decode_probe<T: DeserializeOwned>(value: &serde_json::Value) -> Result<(), String> {
    T::deserialize(value).map(drop).map_err(|e| e.to_string())
}

impl<K> BlockingSafe for Old<K> {}
impl<T> BlockingSafe for FieldChange<T> {}
impl BlockingSafe for Diff {}
