//! What a handler of `operations(connect)` is given: [`Connect`], a connection about to be
//! opened to a subresource of an object (`kubectl exec`, `attach`, `port-forward`, `proxy`),
//! with the connection's [`ConnectOptions`] in place of the object.

use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::api::authentication::v1::UserInfo;
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// A CONNECT request: who opens which connection to which object. The request carries the
/// connection's options, not the object (the API server has not even looked it up yet); `K`
/// only names the kind whose subresource it is.
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use kopf_runtime::{Connect, Rejection};
///
/// /// No shell in a pod: `kubectl exec` may run other commands.
/// fn no_shells(connect: Connect<Pod>) -> Result<(), Rejection> {
///     let shells = ["sh", "bash", "/bin/sh", "/bin/bash"];
///     match connect.options.command.first() {
///         Some(program) if shells.contains(&program.as_str()) => Err(Rejection::new(format!(
///             "no shells in {}: run the command itself",
///             connect.name
///         ))),
///         _ => Ok(()),
///     }
/// }
/// let exec = serde_json::json!({"kind": "PodExecOptions", "command": ["sh", "-c", "id"]});
/// assert!(no_shells(Connect::new("exec", exec).unwrap()).is_err());
/// ```
#[non_exhaustive]
pub struct Connect<K> {
    /// The subresource connected to: `exec`, `attach`, `portforward` or `proxy`.
    pub subresource: String,
    /// The object's name.
    pub name: String,
    /// The object's namespace (`None` for a cluster-scoped one, e.g. a node).
    pub namespace: Option<String>,
    /// Who opens the connection.
    pub user: UserInfo,
    /// Whether the request is a dry run.
    pub dry_run: bool,
    /// The connection's options, as far as the kinds of connection share them.
    pub options: ConnectOptions,
    raw: serde_json::Value,
    kind: PhantomData<fn() -> K>,
}

impl<K> Connect<K> {
    /// A connection to `subresource` with these options (`PodExecOptions` and the like, as
    /// JSON) and nothing else set: for tests of handlers.
    ///
    /// # Errors
    /// The options do not decode as [`ConnectOptions`] (a field of the wrong type).
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kopf_runtime::Connect;
    /// let attach = Connect::<Pod>::new("attach", serde_json::json!({"container": "app"}))?;
    /// assert_eq!(attach.options.container.as_deref(), Some("app"));
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn new(
        subresource: impl Into<String>,
        options: serde_json::Value,
    ) -> Result<Self, serde_json::Error> {
        Ok(Self {
            subresource: subresource.into(),
            name: String::new(),
            namespace: None,
            user: UserInfo::default(),
            dry_run: false,
            options: ConnectOptions::deserialize(&options)?,
            raw: options,
            kind: PhantomData,
        })
    }

    /// The options as the type of this kind of connection (e.g. a `PodPortForwardOptions` of
    /// your own, for fields [`ConnectOptions`] does not have).
    ///
    /// # Errors
    /// The options do not decode as `O`.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kopf_runtime::Connect;
    /// #[derive(serde::Deserialize)]
    /// struct Proxy {
    ///     path: String,
    /// }
    /// let proxy = Connect::<Pod>::new("proxy", serde_json::json!({"path": "/metrics"}))?;
    /// assert_eq!(proxy.options_as::<Proxy>()?.path, "/metrics");
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn options_as<O: DeserializeOwned>(&self) -> Result<O, serde_json::Error> {
        O::deserialize(&self.raw)
    }

    /// Sets who and what it is for: the rest of a request read off the wire.
    pub(super) fn of(
        mut self,
        name: String,
        namespace: Option<String>,
        user: UserInfo,
        dry_run: bool,
    ) -> Self {
        self.name = name;
        self.namespace = namespace;
        self.user = user;
        self.dry_run = dry_run;
        self
    }
}

impl<K> Clone for Connect<K> {
    fn clone(&self) -> Self {
        Self {
            subresource: self.subresource.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            user: self.user.clone(),
            dry_run: self.dry_run,
            options: self.options.clone(),
            raw: self.raw.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Connect<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connect")
            .field("subresource", &self.subresource)
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("dry_run", &self.dry_run)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The options of a connection, as `PodExecOptions`, `PodAttachOptions`,
/// `PodPortForwardOptions` and `PodProxyOptions` have them (each uses some; the others are
/// empty).
///
/// ```
/// use kopf_runtime::ConnectOptions;
/// let exec: ConnectOptions = serde_json::from_value(serde_json::json!({
///     "kind": "PodExecOptions", "command": ["ls"], "container": "app", "stdout": true,
/// }))?;
/// assert_eq!((exec.command.len(), exec.tty), (1, false));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct ConnectOptions {
    /// `exec`: the command and its arguments.
    pub command: Vec<String>,
    /// `exec`, `attach`: the container (`None`: the pod's only or default one).
    pub container: Option<String>,
    /// `exec`, `attach`: whether the client sends input.
    pub stdin: bool,
    /// `exec`, `attach`: whether the client reads the output.
    pub stdout: bool,
    /// `exec`, `attach`: whether the client reads the errors.
    pub stderr: bool,
    /// `exec`, `attach`: whether a terminal is allocated.
    pub tty: bool,
    /// `portforward`: the ports forwarded.
    pub ports: Vec<i32>,
    /// `proxy`: the path proxied to.
    pub path: Option<String>,
}
