//! The command line shared by the example operators: the operator's own options
//! ([`kopf_runtime::OperatorArgs`]: namespaces, probes, logging, limits, leader election or
//! sharding, each with a `KOPF_*` environment fallback) and `--install-crd`. `--help` lists them.

use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use kopf_runtime::{Operator, OperatorArgs, OperatorBuilder};

/// The options of an example operator, parsed from the command line and the environment.
///
/// ```
/// use kopf_examples::cli::ExampleArgs;
///
/// let args = ExampleArgs::parse_from(["--namespace", "demo", "--json", "--install-crd"])?;
/// assert_eq!(args.operator.namespaces, ["demo"]);
/// assert!(args.install_crd);
/// assert!(ExampleArgs::parse_from(["--bogus"]).is_err());
/// let ha = ExampleArgs::parse_from(["--leader-election", "ops/my-operator"])?;
/// assert!(ha.operator.leader_election.is_some());
/// assert!(ExampleArgs::parse_from(["--leader-election", "no-namespace"]).is_err());
/// # Ok::<(), clap::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Parser)]
#[command(about = "A kopf-rs example operator")]
pub struct ExampleArgs {
    /// The operator's options.
    #[command(flatten)]
    pub operator: OperatorArgs,
    /// Install (server-side apply) the example CRDs before starting
    #[arg(long)]
    pub install_crd: bool,
}

impl ExampleArgs {
    /// Parses the process's arguments and environment; on a wrong option, prints the error
    /// and exits with code 2 (`--help` prints the options and exits with 0).
    ///
    /// ```no_run
    /// let args = kopf_examples::cli::ExampleArgs::from_env();
    /// # drop(args);
    /// ```
    #[must_use]
    pub fn from_env() -> Self {
        Self::parse()
    }

    /// Parses these arguments (without the program name) and the environment.
    ///
    /// # Errors
    /// An unknown option, a missing value, or a value that does not parse.
    ///
    /// ```
    /// let args = kopf_examples::cli::ExampleArgs::parse_from(["--health", "127.0.0.1:8080"])?;
    /// assert_eq!(args.operator.health, Some(([127, 0, 0, 1], 8080).into()));
    /// # Ok::<(), clap::Error>(())
    /// ```
    pub fn parse_from<I, S>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<std::ffi::OsString> + Clone,
    {
        let program = std::iter::once(std::ffi::OsString::from("example"));
        Self::try_parse_from(program.chain(args.into_iter().map(Into::into)))
    }

    /// An operator builder with these options (the examples' shutdown timeout is 20 s unless
    /// `--shutdown-timeout` says otherwise).
    ///
    /// ```
    /// let args = kopf_examples::cli::ExampleArgs::parse_from(["-n", "default"])?;
    /// let builder = args.builder();
    /// # drop(builder); Ok::<(), clap::Error>(())
    /// ```
    pub fn builder(&self) -> OperatorBuilder {
        Operator::builder()
            .shutdown_timeout(Duration::from_secs(20))
            .args(&self.operator)
    }
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
    let args = ExampleArgs::from_env();
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
