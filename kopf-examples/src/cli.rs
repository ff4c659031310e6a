//! The command line shared by the example operators: which namespaces to watch, where to serve
//! the health probes, and running the operator until SIGINT/SIGTERM.
//!
//! Every example binary accepts:
//!
//! ```text
//! --namespace NS   watch only this namespace (repeatable; default: $KOPF_NAMESPACE, else all)
//! --health ADDR    serve /healthz and /readyz on ADDR, e.g. 0.0.0.0:8080 (default: $KOPF_HEALTH)
//! --json           log one JSON object per line instead of human-readable lines
//! --install-crd    install (server-side apply) the example CRDs before starting
//! --leader-election NAMESPACE/NAME
//!                  run as one of several replicas, led by the holder of this Lease
//!                  (default: $KOPF_LEADER_ELECTION; none: a single replica)
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use kopf_runtime::{LeaderElection, LogFormat, Operator, OperatorBuilder};

/// The options of an example operator, parsed from the command line and the environment.
///
/// ```
/// use kopf_examples::cli::ExampleArgs;
///
/// let args = ExampleArgs::parse_from(["--namespace", "demo", "--json"])?;
/// assert_eq!(args.namespaces, ["demo"]);
/// assert!(args.json);
/// assert!(ExampleArgs::parse_from(["--bogus"]).is_err());
/// let ha = ExampleArgs::parse_from(["--leader-election", "ops/my-operator"])?;
/// assert_eq!(ha.leader_election, Some(("ops".to_owned(), "my-operator".to_owned())));
/// assert!(ExampleArgs::parse_from(["--leader-election", "no-namespace"]).is_err());
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExampleArgs {
    /// Namespaces to watch (empty: all).
    pub namespaces: Vec<String>,
    /// Where to serve the health probes.
    pub health: Option<SocketAddr>,
    /// Log in JSON.
    pub json: bool,
    /// Install the example CRDs before starting.
    pub install_crd: bool,
    /// The Lease of the leader election, as `(namespace, name)`.
    pub leader_election: Option<(String, String)>,
}

impl ExampleArgs {
    /// Parses the process's arguments, with `$KOPF_NAMESPACE` and `$KOPF_HEALTH` as defaults.
    ///
    /// # Errors
    /// An unknown option, a missing value, or an address that does not parse.
    ///
    /// ```no_run
    /// let args = kopf_examples::cli::ExampleArgs::from_env()?;
    /// # drop(args); Ok::<(), anyhow::Error>(())
    /// ```
    pub fn from_env() -> anyhow::Result<Self> {
        let mut args = Self::parse_from(std::env::args().skip(1))?;
        if args.namespaces.is_empty()
            && let Ok(ns) = std::env::var("KOPF_NAMESPACE")
            && !ns.is_empty()
        {
            args.namespaces.push(ns);
        }
        if args.health.is_none()
            && let Ok(addr) = std::env::var("KOPF_HEALTH")
            && !addr.is_empty()
        {
            args.health = Some(parse_addr(&addr)?);
        }
        if args.leader_election.is_none()
            && let Ok(lease) = std::env::var("KOPF_LEADER_ELECTION")
            && !lease.is_empty()
        {
            args.leader_election = Some(parse_lease(&lease)?);
        }
        Ok(args)
    }

    /// Parses these arguments (without the program name) and nothing else.
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    ///
    /// ```
    /// let args = kopf_examples::cli::ExampleArgs::parse_from(["--health", "127.0.0.1:8080"])?;
    /// assert_eq!(args.health, Some(([127, 0, 0, 1], 8080).into()));
    /// # Ok::<(), anyhow::Error>(())
    /// ```
    pub fn parse_from<I, S>(args: I) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut out = Self::default();
        let mut args = args.into_iter().map(Into::into);
        while let Some(arg) = args.next() {
            let mut value =
                |name: &str| args.next().with_context(|| format!("{name} needs a value"));
            match arg.as_str() {
                "--namespace" | "-n" => out.namespaces.push(value("--namespace")?),
                "--health" => out.health = Some(parse_addr(&value("--health")?)?),
                "--json" => out.json = true,
                "--install-crd" => out.install_crd = true,
                "--leader-election" => {
                    out.leader_election = Some(parse_lease(&value("--leader-election")?)?);
                }
                other => bail!(
                    "unknown option `{other}`; the options are --namespace NS, --health ADDR, \
                     --json, --install-crd, --leader-election NAMESPACE/NAME"
                ),
            }
        }
        Ok(out)
    }

    /// An operator builder with these options: the handlers of this binary, the namespaces, the
    /// health address and the log format.
    ///
    /// ```
    /// let args = kopf_examples::cli::ExampleArgs::parse_from(["-n", "default"])?;
    /// let builder = args.builder();
    /// # drop(builder); Ok::<(), anyhow::Error>(())
    /// ```
    pub fn builder(&self) -> OperatorBuilder {
        let mut builder = Operator::builder()
            .namespaces(self.namespaces.clone())
            .shutdown_timeout(Duration::from_secs(20))
            .log_format(if self.json {
                LogFormat::Json
            } else {
                LogFormat::Human
            });
        if let Some(addr) = self.health {
            builder = builder.health_addr(addr);
        }
        if let Some((namespace, name)) = &self.leader_election {
            builder = builder.leader_election(LeaderElection::new(name, namespace));
        }
        builder
    }
}

/// `NAMESPACE/NAME` of a Lease.
fn parse_lease(text: &str) -> anyhow::Result<(String, String)> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => bail!("--leader-election takes NAMESPACE/NAME (a Lease), not `{text}`"),
    }
}

fn parse_addr(text: &str) -> anyhow::Result<SocketAddr> {
    text.parse()
        .with_context(|| format!("`{text}` is not an address such as 0.0.0.0:8080"))
}

/// Runs the handlers of the calling binary as an operator, with the options from the command
/// line, until SIGINT or SIGTERM. What every example's `main` calls.
///
/// # Errors
/// Bad options, or the operator could not start (no cluster configuration, no handlers).
///
/// # Cancellation safety
/// Not cancel safe: the operator's tasks keep running if the future is dropped.
///
/// ```no_run
/// #[tokio::main]
/// async fn main() -> anyhow::Result<()> {
///     kopf_examples::cli::run().await
/// }
/// ```
pub async fn run() -> anyhow::Result<()> {
    let args = ExampleArgs::from_env()?;
    if args.install_crd {
        install_crds().await?;
    }
    args.builder().run().await?;
    Ok(())
}

/// Installs (server-side applies) the example CRDs with the client from the environment and
/// waits until the API server serves them.
///
/// # Errors
/// No cluster configuration, the apply is refused, or a CRD is not established within 30 s.
///
/// # Cancellation safety
/// Cancel safe: applying is idempotent; a dropped call may leave the CRDs installed.
///
/// ```no_run
/// # #[allow(dead_code)]
/// # async fn demo() -> anyhow::Result<()> {
/// kopf_examples::cli::install_crds().await?;
/// # Ok(()) }
/// ```
pub async fn install_crds() -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("no cluster configuration (set KUBECONFIG)")?;
    install_crds_with(&client).await
}

/// [`install_crds`] with this client.
///
/// # Errors
/// As [`install_crds`].
///
/// # Cancellation safety
/// As [`install_crds`].
///
/// ```no_run
/// # #[allow(dead_code)]
/// # async fn demo(client: kube::Client) -> anyhow::Result<()> {
/// kopf_examples::cli::install_crds_with(&client).await?;
/// # Ok(()) }
/// ```
pub async fn install_crds_with(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, Patch, PatchParams};

    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("kopf-examples").force();
    for crd in crate::crd::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("cannot install the CRD {name}"))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let established = api
                .get(&name)
                .await
                .ok()
                .and_then(|crd| crd.status)
                .and_then(|status| status.conditions)
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the CRD {name} was not established within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}
