//! Connecting to the test API server named by `KUBECONFIG`.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// How to get a test server, repeated in every "cannot connect" message.
pub const HOW_TO_START: &str = "start the test environment with \
    `tools/kube-testenv/build.sh && eval \"$(tools/kube-testenv/start.sh)\"` \
    (this exports KUBECONFIG=<repo>/target/kube/kubeconfig), then run the tests again";

/// How long a first request may take before the server counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Reads the kubeconfig at `path` into a [`Config`] (its current context).
///
/// # Errors
///
/// If the file cannot be read or parsed, or its current context is incomplete.
///
/// # Cancellation safety
///
/// Cancel-safe: it only reads a file.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// let config = kopf_tests::config_from_file("target/kube/kubeconfig").await?;
/// let client = kube::Client::try_from(config)?;
/// println!("{:?}", client.apiserver_version().await?);
/// # Ok(()) }
/// ```
pub async fn config_from_file(path: impl AsRef<Path>) -> anyhow::Result<Config> {
    let path = path.as_ref();
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("the kubeconfig {} is unusable", path.display()))
}

/// The [`Config`] of the test server named by the `KUBECONFIG` environment variable.
///
/// Unlike [`Config::infer`], this never falls back to `~/.kube/config` or an in-cluster
/// account: tests must not silently run against some other cluster.
///
/// # Errors
///
/// If `KUBECONFIG` is unset or empty, or the file is unreadable; the message says how to start
/// the test environment.
///
/// # Cancellation safety
///
/// Cancel-safe: it only reads a file.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// let config = kopf_tests::test_config().await?;
/// println!("testing against {}", config.cluster_url);
/// # Ok(()) }
/// ```
pub async fn test_config() -> anyhow::Result<Config> {
    let path = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()).ok_or_else(|| {
        anyhow::anyhow!(
            "KUBECONFIG is not set: the integration tests need a real kube-apiserver; {HOW_TO_START}"
        )
    })?;
    // KUBECONFIG may list several files; the test environment writes exactly one.
    let first = std::env::split_paths(&path).next().unwrap_or_default();
    config_from_file(&first).await.map_err(|err| {
        anyhow::anyhow!(
            "KUBECONFIG={} is unusable: {err:#}; {HOW_TO_START}",
            first.display()
        )
    })
}

/// Builds a client for `config` and checks that the server answers within [`CONNECT_TIMEOUT`].
///
/// # Errors
///
/// If the client cannot be built or the server does not answer (with the cause).
///
/// # Cancellation safety
///
/// Cancel-safe: dropping it drops one version request.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// let config = kopf_tests::config_from_file("target/kube/kubeconfig").await?;
/// let client = kopf_tests::connect(config).await?;
/// println!("{:?}", client.apiserver_version().await?);
/// # Ok(()) }
/// ```
pub async fn connect(config: Config) -> anyhow::Result<Client> {
    let url = config.cluster_url.clone();
    let client = Client::try_from(config).context("cannot build a Kubernetes client")?;
    match tokio::time::timeout(CONNECT_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(client),
        Ok(Err(err)) => Err(anyhow::Error::new(err).context(format!("{url} does not answer"))),
        Err(_) => Err(anyhow::anyhow!(
            "{url} did not answer within {CONNECT_TIMEOUT:?}"
        )),
    }
}

/// A client for the test server named by `KUBECONFIG`; the entry point of every integration test.
///
/// # Panics
///
/// If `KUBECONFIG` is unset, unreadable, or the server does not answer: the message names
/// `KUBECONFIG` and how to start the test environment. Tests are never silently skipped.
///
/// # Cancellation safety
///
/// Cancel-safe, as [`connect`].
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// let client = kopf_tests::test_client().await;
/// let version = client.apiserver_version().await.unwrap();
/// println!("{}.{}", version.major, version.minor);
/// # Ok(()) }
/// ```
pub async fn test_client() -> Client {
    let config = match test_config().await {
        Ok(config) => config,
        Err(err) => panic!("{err:#}"),
    };
    let url = config.cluster_url.clone();
    match connect(config).await {
        Ok(client) => client,
        Err(err) => panic!(
            "cannot reach the test kube-apiserver at {url} (from KUBECONFIG): {err:#}; {HOW_TO_START}"
        ),
    }
}

/// The test server's configuration (`KUBECONFIG`), authenticating only with `token` (e.g. a
/// ServiceAccount's, to run code with exactly that account's permissions).
///
/// # Errors
///
/// If `KUBECONFIG` is unset or its file cannot be read or parsed.
///
/// # Cancellation safety
///
/// Cancel-safe: it only reads a file.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// let admin = kopf_tests::test_client().await;
/// let token = kopf_tests::service_account_token(&admin, "default", "default").await?;
/// let as_account = kube::Client::try_from(kopf_tests::token_config(&token).await?)?;
/// # drop(as_account); Ok(()) }
/// ```
pub async fn token_config(token: &str) -> anyhow::Result<Config> {
    let path = std::env::var("KUBECONFIG")?;
    let mut yaml: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(path)?)?;
    for user in yaml["users"].as_sequence_mut().into_iter().flatten() {
        user["user"] = serde_yaml::to_value(serde_json::json!({ "token": token }))?;
    }
    let kubeconfig = Kubeconfig::from_yaml(&serde_yaml::to_string(&yaml)?)?;
    Ok(Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
}

/// A token of the ServiceAccount `name` in `ns`, valid for an hour, requested by `admin`.
///
/// # Errors
///
/// The API error of the token request.
///
/// # Cancellation safety
///
/// Cancel-safe: a token requested and dropped is simply never used.
pub async fn service_account_token(admin: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(admin.clone(), ns);
    let response = accounts
        .create_token_request(name, &kube::api::PostParams::default(), &request)
        .await?;
    Ok(response.status.and_then(|s| s.token).unwrap_or_default())
}
