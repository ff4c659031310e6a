//! `Children<K>`: the injectable that applies a handler's owned children (kopf's `adopt` plus
//! a server-side apply), and `ChildError`, what such a write can fail with.
//!
//! ```text
//!  children.apply("config", cm) ─▶ name "<owner>-config" (unless cm has one)
//!                                 ─▶ namespace: the owner's (namespaced child of a namespaced owner)
//!                                 ─▶ ownerReference to the owner (controller, blockOwnerDeletion)
//!                                 ─▶ the owner's labels (the child's own win)
//!                                 ─▶ server-side apply, the operator's field manager, force,
//!                                    through the operator's (fenced) client
//!                                 ─▶ the returned resourceVersion into the echo record
//! ```
//!
//! The echo record ([`super::echoes`]) lets the child watch ignore the operator's own writes;
//! deleting the owner lets the garbage collector delete the children.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::child_error::ChildError;
use super::echoes::{ChildKey, ChildWrites};
use super::inject::Inject;
use super::resource::ScopeKind;
use crate::core::erased::Invocation;
use crate::core::outcome::HandlerError;

/// The owner, as its children name it.
#[derive(Debug, Clone)]
struct Owner {
    api_version: String,
    kind: String,
    name: String,
    namespace: Option<String>,
    uid: String,
    labels: BTreeMap<String, String>,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Applies the children of the handler's object (its owner) — a handler parameter.
///
/// [`Children::apply`] names the child after its owner, puts it in the owner's namespace, makes
/// the owner its controller (an owner reference with `controller` and `blockOwnerDeletion`, as
/// kopf's `adopt`), gives it the owner's labels, and writes it by server-side apply with the
/// operator's field manager and `force` (the operator is the authority on the fields it
/// applies; fields others set are left alone). Deleting the owner has the Kubernetes garbage
/// collector delete the children. Writes go through the operator's client, so a replica that
/// does not lead writes nothing.
///
/// ```no_run
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kopf_runtime::{Children, HandlerError};
/// # use kopf_runtime::engine::ChildWrites;
///
/// /// A copy of each ConfigMap's data, in the ConfigMap `<name>-copy` it owns.
/// async fn copy(cm: Arc<ConfigMap>, children: Children<ConfigMap>) -> Result<(), HandlerError> {
///     let copy = ConfigMap { data: cm.data.clone(), ..ConfigMap::default() };
///     children.apply("copy", copy).await?; // named "<name>-copy", owned by `cm`
///     Ok(())
/// }
/// # async fn demo(client: kube::Client, cm: ConfigMap) -> Result<(), HandlerError> {
/// # let children = Children::new(&cm, client, Arc::new(ChildWrites::new("op")))?;
/// # copy(Arc::new(cm), children).await
/// # }
/// # let _ = demo;
/// ```
pub struct Children<K> {
    owner: Arc<Owner>,
    client: kube::Client,
    writes: Arc<ChildWrites>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Children<K> {
    fn clone(&self) -> Self {
        Self {
            owner: self.owner.clone(),
            client: self.client.clone(),
            writes: self.writes.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Children<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Children")
            .field("owner", &self.owner.to_string())
            .field("field_manager", &self.writes.field_manager())
            .finish_non_exhaustive()
    }
}

impl<K> Inject<K> for Children<K>
where
    K: Resource<DynamicType = ()>,
    K::Scope: ScopeKind,
{
    fn inject(invocation: &Invocation) -> Result<Self, HandlerError> {
        let client = invocation.services.get::<kube::Client>();
        let writes = invocation.services.get::<ChildWrites>();
        let (Some(client), Some(writes)) = (client, writes) else {
            return Err(HandlerError::permanent(
                "`Children` needs the operator's client and `ChildWrites` in its services (the \
                 operator provides both)",
            ));
        };
        let object = &invocation.object;
        let reference = object.reference();
        let labels = (object.body_value().get("metadata"))
            .and_then(|m| m.get("labels"))
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        let owner = Owner {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            name: reference.name.to_string(),
            namespace: reference.namespace.as_deref().map(str::to_owned),
            uid: reference.uid.to_string(),
            labels,
        };
        Ok(Self::with_owner(owner, (*client).clone(), writes))
    }
}

impl<K> Children<K>
where
    K: Resource<DynamicType = ()>,
    K::Scope: ScopeKind,
{
    /// The children of `owner` (an object read from the API server: it needs a name and a
    /// UID), written through `client` with `writes`' field manager. A handler takes `Children`
    /// as a parameter instead; this is for code outside handlers.
    ///
    /// # Errors
    /// [`ChildError::Unfit`] when `owner` has no name or UID.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kopf_runtime::Children;
    /// use kopf_runtime::engine::ChildWrites;
    ///
    /// let mut owner = ConfigMap::default();
    /// owner.metadata.name = Some("app".into());
    /// owner.metadata.namespace = Some("ns".into());
    /// owner.metadata.uid = Some("uid-1".into());
    /// let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
    /// let children = Children::new(&owner, client, Arc::new(ChildWrites::new("op"))).unwrap();
    /// assert_eq!(children.name_for("config"), "app-config");
    /// assert_eq!(children.name_for(""), "app");
    /// # }
    /// ```
    pub fn new(
        owner: &K,
        client: kube::Client,
        writes: Arc<ChildWrites>,
    ) -> Result<Self, ChildError> {
        let meta = owner.meta();
        let kind = K::kind(&()).into_owned();
        let unfit = |reason: &str| ChildError::Unfit {
            child: format!("a child of a {kind}"),
            owner: format!("{kind} {}", meta.name.as_deref().unwrap_or("<unnamed>")),
            reason: reason.to_owned(),
        };
        let name = meta
            .name
            .clone()
            .ok_or_else(|| unfit("the owner has no name"))?;
        let uid = meta
            .uid
            .clone()
            .ok_or_else(|| unfit("the owner has no UID (read it from the API server)"))?;
        let owner = Owner {
            api_version: K::api_version(&()).into_owned(),
            kind: kind.clone(),
            name,
            namespace: meta.namespace.clone(),
            uid,
            labels: meta.labels.clone().unwrap_or_default(),
        };
        Ok(Self::with_owner(owner, client, writes))
    }

    fn with_owner(owner: Owner, client: kube::Client, writes: Arc<ChildWrites>) -> Self {
        Self {
            owner: Arc::new(owner),
            client,
            writes,
            _kind: PhantomData,
        }
    }

    /// The name of the child with `suffix`: the owner's name, then `-<suffix>` unless empty.
    #[must_use]
    pub fn name_for(&self, suffix: &str) -> String {
        if suffix.is_empty() {
            self.owner.name.clone()
        } else {
            format!("{}-{suffix}", self.owner.name)
        }
    }

    /// The owner reference the children carry: the owner as their controller, blocking its
    /// deletion in the foreground until they are gone.
    #[must_use]
    pub fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.owner.api_version.clone(),
            kind: self.owner.kind.clone(),
            name: self.owner.name.clone(),
            uid: self.owner.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// Writes `child` by server-side apply and returns it as the API server stored it.
    ///
    /// Its name, unless it has one, is [`Children::name_for`]`(suffix)`; the rest is as
    /// described on [`Children`]. Apply the whole child every time: fields an earlier apply
    /// set and this one leaves out are removed by the API server.
    ///
    /// # Errors
    /// [`ChildError`], naming the child and the owner; with `?` in a handler it becomes a
    /// temporary error for 409, 429 and 5xx answers and transport failures, and a permanent
    /// one for 422 (with the server's message) and for a child that cannot belong to the owner.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the write done; applying again is harmless.
    pub async fn apply<C>(&self, suffix: &str, mut child: C) -> Result<C, ChildError>
    where
        C: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone,
        C::Scope: ScopeKind,
    {
        let (namespace, name) = self.adopt(suffix, &mut child)?;
        let at = self.at::<C>(namespace.as_deref(), &name);
        let mut body = serde_json::to_value(&child).map_err(|e| at.failed_encoding(&e))?;
        if let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            for server_owned in [
                "resourceVersion",
                "managedFields",
                "uid",
                "creationTimestamp",
            ] {
                meta.remove(server_owned);
            }
        }
        let params = PatchParams::apply(self.writes.field_manager()).force();
        let flight = self.writes.echoes().begin(at.key.clone());
        let stored = at
            .api(&self.client)
            .patch(&name, &params, &Patch::Apply(&body))
            .await
            .map_err(|e| at.failed(e))?;
        flight.written(stored.metadata.resource_version.clone());
        decode(&at, stored)
    }

    /// The child with `suffix` (named as [`Children::apply`] names it), if it exists.
    ///
    /// # Errors
    /// [`ChildError`] if the read fails (a missing child is `Ok(None)`).
    ///
    /// # Cancellation safety
    /// Cancel-safe.
    pub async fn get<C>(&self, suffix: &str) -> Result<Option<C>, ChildError>
    where
        C: Resource<DynamicType = ()> + DeserializeOwned + Clone,
        C::Scope: ScopeKind,
    {
        let name = self.name_for(suffix);
        let at = self.at::<C>(self.child_namespace::<C>(None, &name)?.as_deref(), &name);
        let found = at
            .api(&self.client)
            .get_opt(&name)
            .await
            .map_err(|e| at.failed(e))?;
        found.map(|obj| decode(&at, obj)).transpose()
    }

    /// Deletes the child with `suffix` (in the background: its own dependents follow); returns
    /// whether it existed.
    ///
    /// # Errors
    /// [`ChildError`] if the delete fails (a missing child is `Ok(false)`).
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the child deleted; deleting again is harmless.
    pub async fn delete<C>(&self, suffix: &str) -> Result<bool, ChildError>
    where
        C: Resource<DynamicType = ()> + DeserializeOwned + Clone,
        C::Scope: ScopeKind,
    {
        let name = self.name_for(suffix);
        let at = self.at::<C>(self.child_namespace::<C>(None, &name)?.as_deref(), &name);
        match at
            .api(&self.client)
            .delete(&name, &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(at.failed(e)),
        }
    }

    /// Names, places, owns and labels `child` (kopf's `adopt`); returns its namespace and name.
    fn adopt<C>(&self, suffix: &str, child: &mut C) -> Result<(Option<String>, String), ChildError>
    where
        C: Resource<DynamicType = ()>,
        C::Scope: ScopeKind,
    {
        let meta = child.meta_mut();
        let name = match meta.name.as_deref() {
            Some(name) if !name.is_empty() => name.to_owned(),
            _ => self.name_for(suffix),
        };
        let namespace = self.child_namespace::<C>(meta.namespace.as_deref(), &name)?;
        let unfit = |reason: String| self.unfit::<C>(namespace.as_deref(), &name, reason);
        let refs = meta.owner_references.get_or_insert_with(Vec::new);
        if let Some(other) = refs
            .iter()
            .find(|r| r.controller == Some(true) && r.uid != self.owner.uid)
        {
            return Err(unfit(format!(
                "it names another controller, {} {}",
                other.kind, other.name
            )));
        }
        refs.retain(|r| r.uid != self.owner.uid);
        refs.push(self.owner_reference());
        let labels = meta.labels.get_or_insert_with(BTreeMap::new);
        for (key, value) in &self.owner.labels {
            labels.entry(key.clone()).or_insert_with(|| value.clone());
        }
        meta.name = Some(name.clone());
        meta.namespace.clone_from(&namespace);
        Ok((namespace, name))
    }

    /// Where a child of kind `C` goes: a namespaced child of a namespaced owner in the owner's
    /// namespace; of a cluster-scoped owner, in the namespace it names; a cluster-scoped child
    /// only of a cluster-scoped owner (the garbage collector would delete it at once).
    fn child_namespace<C>(
        &self,
        given: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ChildError>
    where
        C: Resource<DynamicType = ()>,
        C::Scope: ScopeKind,
    {
        let owner_ns = self.owner.namespace.as_deref();
        let unfit = |reason: &str| self.unfit::<C>(given, name, reason.to_owned());
        match (<C::Scope as ScopeKind>::NAMESPACED, owner_ns, given) {
            (true, Some(owner), Some(given)) if given != owner => Err(unfit(
                "a namespaced owner can only own children in its own namespace",
            )),
            (true, Some(owner), _) => Ok(Some(owner.to_owned())),
            (true, None, Some(given)) if !given.is_empty() => Ok(Some(given.to_owned())),
            (true, None, _) => Err(unfit(
                "a namespaced child of a cluster-scoped owner needs its namespace set",
            )),
            (false, Some(_), _) => Err(unfit(
                "a cluster-scoped child cannot belong to a namespaced owner",
            )),
            (false, None, _) => Ok(None),
        }
    }

    fn unfit<C: Resource<DynamicType = ()>>(
        &self,
        ns: Option<&str>,
        name: &str,
        reason: String,
    ) -> ChildError {
        ChildError::Unfit {
            child: describe(&C::kind(&()), ns, name),
            owner: self.owner.to_string(),
            reason,
        }
    }

    fn at<C: Resource<DynamicType = ()>>(&self, namespace: Option<&str>, name: &str) -> At {
        At {
            resource: ApiResource::erase::<C>(&()),
            key: ChildKey {
                group: C::group(&()).into_owned(),
                kind: C::kind(&()).into_owned(),
                namespace: namespace.map(str::to_owned),
                name: name.to_owned(),
            },
            owner: self.owner.to_string(),
        }
    }
}

/// One child's place, for requests and errors.
struct At {
    resource: ApiResource,
    key: ChildKey,
    owner: String,
}

impl At {
    fn api(&self, client: &kube::Client) -> Api<DynamicObject> {
        match &self.key.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &self.resource),
            None => Api::all_with(client.clone(), &self.resource),
        }
    }

    fn child(&self) -> String {
        describe(
            &self.key.kind,
            self.key.namespace.as_deref(),
            &self.key.name,
        )
    }

    fn failed(&self, source: kube::Error) -> ChildError {
        ChildError::Api {
            child: self.child(),
            owner: self.owner.clone(),
            source,
        }
    }

    fn failed_encoding(&self, source: &serde_json::Error) -> ChildError {
        ChildError::Encoding {
            child: self.child(),
            owner: self.owner.clone(),
            reason: source.to_string(),
        }
    }
}

fn describe(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

fn decode<C: DeserializeOwned>(at: &At, object: DynamicObject) -> Result<C, ChildError> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| at.failed_encoding(&e))
}

#[cfg(test)]
#[path = "children_tests.rs"]
mod tests;
