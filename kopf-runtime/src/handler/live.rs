//! `Live<K>`: the latest version of a handler's object.

use crate::core::sync::lock;
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;

use crate::core::latest::ObjectWatch;
use crate::core::object::ObjectState;

/// The latest version of the handler's object, updated on every watch event while the handler
/// runs. Async handlers only (`changed` waits for the next version).
///
/// A version that does not decode into `K` is skipped (with a warning): [`Live::get`] keeps
/// returning the last version that did.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::sync::Arc;
/// use kopf_runtime::Live;
/// use kopf_runtime::engine::{ObjectState, ObjectWatch};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use serde_json::json;
///
/// let v1 = json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "1"}});
/// let (tx, rx) = ObjectWatch::channel(Arc::new(ObjectState::from_json(v1).unwrap()));
/// let mut live = Live::<ConfigMap>::new(rx).unwrap();
/// assert_eq!(live.get().metadata.resource_version.as_deref(), Some("1"));
///
/// let v2 = json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "2"}});
/// tx.send_replace(Arc::new(ObjectState::from_json(v2).unwrap()));
/// let latest = live.changed().await.unwrap();
/// assert_eq!(latest.metadata.resource_version.as_deref(), Some("2"));
/// drop(tx);
/// assert!(live.changed().await.is_none()); // no more versions will come
/// # }
/// ```
pub struct Live<K> {
    rx: ObjectWatch,
    last: Mutex<Arc<K>>,
}

impl<K> fmt::Debug for Live<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Live")
            .field("object", self.rx.borrow().reference())
            .finish()
    }
}

impl<K: DeserializeOwned + Send + Sync + 'static> Live<K> {
    /// Follows the versions sent on `rx`, starting with the current one.
    ///
    /// # Errors
    /// The deserialization error if the current version does not decode into `K`.
    ///
    /// ```
    /// # use std::sync::Arc; use kopf_runtime::Live;
    /// # use kopf_runtime::engine::{ObjectState, ObjectWatch};
    /// let obj = ObjectState::from_json(serde_json::json!({"metadata": {"name": "a", "uid": "u"}}));
    /// let (_tx, rx) = ObjectWatch::channel(Arc::new(obj.unwrap()));
    /// assert!(Live::<u32>::new(rx).is_err());
    /// ```
    pub fn new(mut rx: ObjectWatch) -> Result<Self, Arc<serde_json::Error>> {
        let current = rx.borrow_and_update().decode::<K>()?;
        Ok(Self {
            rx,
            last: Mutex::new(current),
        })
    }

    /// The latest version that decoded into `K`.
    #[must_use]
    pub fn get(&self) -> Arc<K> {
        let state = self.rx.borrow();
        let mut last = lock(&self.last);
        if let Ok(decoded) = state.decode::<K>() {
            *last = decoded;
        }
        last.clone()
    }

    /// The latest version as the framework sees it (identity, deletion mark, JSON body).
    #[must_use]
    pub fn state(&self) -> Arc<ObjectState> {
        self.rx.borrow()
    }

    /// Waits for a newer version than the last one seen and returns it; `None` once no more
    /// versions will come (the object is gone or the handler is being stopped).
    ///
    /// # Cancellation safety
    /// This method is cancel safe: a version that arrives while the future is dropped is
    /// returned by the next call.
    pub async fn changed(&mut self) -> Option<Arc<K>> {
        loop {
            self.rx.changed().await.ok()?;
            let state = self.rx.borrow_and_update();
            match state.decode::<K>() {
                Ok(decoded) => {
                    *lock(&self.last) = decoded.clone();
                    return Some(decoded);
                }
                Err(error) => tracing::warn!(
                    object = %state.reference(),
                    %error,
                    "skipping a version that does not deserialize into `{}`",
                    std::any::type_name::<K>()
                ),
            }
        }
    }
}
