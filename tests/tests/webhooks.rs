//! Admission webhooks against the real API server, which calls the operator's server on the
//! loopback over TLS with the CA the operator made: a rejection `kubectl` shows, warnings, a
//! mutation applied, a refused deletion, a handler's timeout under either failure policy, and
//! bodies that are not reviews refused clearly while the server goes on serving.

mod operator_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::{Operator, Rejection, Review, Warnings, Webhooks, mutate, validate};
use kopf_tests::{free_port, kubectl, test_config};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use operator_common::*;
use serde_json::json;

/// Refuses `spec.field: forbidden`, warns about `risky`.
#[validate(id = "wh-field")]
fn field_allowed(obj: &KopfExample) -> Result<Warnings, Rejection> {
    match obj.spec.field.as_deref() {
        Some("forbidden") => Err(Rejection::new("spec.field must not be \"forbidden\"")),
        Some("risky") => Ok(Warnings::from_iter(["spec.field is risky"])),
        _ => Ok(Warnings::default()),
    }
}

/// Labels every object with the operation that last admitted it.
#[mutate(id = "wh-stamp")]
fn stamp(obj: &mut KopfExample, review: Review<KopfExample>) {
    let label = review.operation.as_str().to_ascii_lowercase();
    (obj.metadata.labels.get_or_insert_default()).insert("stamped".into(), label);
}

/// Objects labelled `protected=yes` cannot be deleted.
#[validate(id = "wh-protect", operations(delete))]
fn keep_protected(obj: Arc<KopfExample>) -> Result<(), Rejection> {
    let labels = obj.metadata.labels.as_ref();
    if labels
        .and_then(|l| l.get("protected"))
        .is_some_and(|v| v == "yes")
    {
        return Err(Rejection::new("protected objects cannot be deleted"));
    }
    Ok(())
}

async fn slow_if_named_slow(name: Option<&str>) {
    if name.is_some_and(|n| n.starts_with("slow-")) {
        tokio::time::sleep(Duration::from_secs(20)).await;
    }
}

/// Takes too long for `slow-*` ConfigMaps; the API server admits them (`ignore`).
#[validate(
    id = "wh-slow-ignore",
    operations(create),
    timeout = "2s",
    failure_policy = "ignore"
)]
async fn slow_maps(map: &ConfigMap) {
    slow_if_named_slow(map.metadata.name.as_deref()).await;
}

/// Takes too long for `slow-*` Secrets; the API server refuses them (`fail`, the default).
#[validate(id = "wh-slow-fail", operations(create), timeout = "2s")]
async fn slow_secrets(secret: &Secret) {
    slow_if_named_slow(secret.metadata.name.as_deref()).await;
}

/// Refuses new ConfigMaps labelled `guard=yes` that have no data: the label is checked by the
/// API server (`objectSelector`) and the server, the data by `when`.
#[validate(
    id = "wh-guard",
    operations(create),
    labels(guard = "yes"),
    when = |m: &ConfigMap| m.data.is_none()
)]
fn guard(_map: &ConfigMap) -> Result<(), Rejection> {
    Err(Rejection::new("guarded ConfigMaps need data"))
}

const HANDLERS: [&str; 6] = [
    "wh-field",
    "wh-stamp",
    "wh-protect",
    "wh-slow-ignore",
    "wh-slow-fail",
    "wh-guard",
];

/// An object of a built-in kind with only a name.
fn named<K: Default + kube::Resource>(name: &str) -> K {
    let mut object = K::default();
    object.meta_mut().name = Some(name.to_owned());
    object
}

fn example(name: &str, field: &str) -> KopfExample {
    let spec = KopfExampleSpec {
        field: Some(field.to_owned()),
        ..KopfExampleSpec::default()
    };
    KopfExample::new(name, spec)
}

/// An operator named `name` serving [`HANDLERS`] for `ns` on a free loopback port; its CA in
/// the Secret `wh-ca` of `ns`.
async fn webhook_operator(name: &str, ns: &str) -> anyhow::Result<Operator> {
    init_test_logging();
    let url = format!("https://127.0.0.1:{}", free_port());
    let settings = Webhooks::url(url).ca_secret(ns, "wh-ca").handlers(HANDLERS);
    Ok(Operator::builder()
        .name(name)
        .kube_config(test_config().await?)
        .namespaces([ns])
        .webhooks(settings)
        .shutdown_timeout(Duration::from_secs(5))
        .start()
        .await?)
}

async fn remove_configurations(name: &str) -> anyhow::Result<()> {
    kopf_tests::remove_webhook_configurations(&client().await, name).await
}

/// The API server's message for a refused request.
fn refusal(result: Result<impl std::fmt::Debug, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) => status.message,
        other => format!("not refused: {other:?}"),
    }
}

#[tokio::test]
async fn the_api_server_asks_the_handlers_and_follows_their_answers() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let name = format!("wh-{}", ns.name());
    let op = webhook_operator(&name, ns.name()).await?;
    let post = PostParams::default();

    // The API server picks the configuration up within a moment: refused once it has.
    let deadline = Instant::now() + PROMPTLY;
    loop {
        match api.create(&post, &example("forbidden", "forbidden")).await {
            Err(kube::Error::Api(status)) => {
                assert!(
                    status
                        .message
                        .contains("spec.field must not be \"forbidden\""),
                    "{status:?}"
                );
                break;
            }
            Ok(_) => {
                api.delete("forbidden", &DeleteParams::default()).await?;
                assert!(Instant::now() < deadline, "the webhook never took effect");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(other) => return Err(other.into()),
        }
    }

    // kubectl shows the message verbatim, and the warnings.
    let manifest = |name: &str, field: &str| {
        json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
               "metadata": {"name": name, "namespace": ns.name()}, "spec": {"field": field}})
        .to_string()
    };
    let (ok, out) = kubectl(
        &["create", "-f", "-"],
        &manifest("kc-forbidden", "forbidden"),
    )
    .await?;
    assert!(!ok, "{out}");
    assert!(
        out.contains("denied the request: spec.field must not be \"forbidden\""),
        "{out}"
    );
    let (ok, out) = kubectl(&["create", "-f", "-"], &manifest("kc-risky", "risky")).await?;
    assert!(ok, "{out}");
    assert!(out.contains("Warning: spec.field is risky"), "{out}");

    // The mutation is applied, on create and on update; an update can be refused too.
    let created = api.create(&post, &example("plain", "fine")).await?;
    assert_eq!(
        created.metadata.labels.unwrap_or_default()["stamped"],
        "create"
    );
    let params = PatchParams::default();
    let to = |field: &str| Patch::Merge(json!({"spec": {"field": field}}));
    let updated = api.patch("plain", &params, &to("still-fine")).await?;
    assert_eq!(
        updated.metadata.labels.unwrap_or_default()["stamped"],
        "update"
    );
    let refused = refusal(api.patch("plain", &params, &to("forbidden")).await);
    assert!(refused.contains("must not be \"forbidden\""), "{refused}");

    // A deletion is refused while the object is protected, and done once it is not.
    let protect = |v: &str| Patch::Merge(json!({"metadata": {"labels": {"protected": v}}}));
    api.patch("plain", &params, &protect("yes")).await?;
    let refused = refusal(api.delete("plain", &DeleteParams::default()).await);
    assert!(
        refused.contains("protected objects cannot be deleted"),
        "{refused}"
    );
    api.patch("plain", &params, &protect("no")).await?;
    api.delete("plain", &DeleteParams::default()).await?;

    // A handler that takes too long: admitted under `ignore`, refused under `fail`; the API
    // server waits no longer than the handler's timeout (2 s) and some slack.
    let maps: Api<ConfigMap> = ns.api();
    let secrets: Api<Secret> = ns.api();
    let started = Instant::now();
    maps.create(&post, &named("slow-map")).await?;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1400),
        "the handler was waited for: {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "the timeout was honoured: {took:?}"
    );
    let started = Instant::now();
    let refused = refusal(secrets.create(&post, &named("slow-secret")).await);
    assert!(refused.contains("did not answer"), "{refused}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Positive controls: the same kinds, not slow, pass at once.
    maps.create(&post, &named("quick-map")).await?;
    secrets.create(&post, &named("quick-secret")).await?;

    // Filters: only a labelled ConfigMap without data is refused.
    let map = |name: &str, guard: Option<&str>, data: bool| -> anyhow::Result<ConfigMap> {
        let labels = guard.map(|g| json!({"guard": g}));
        let data = data.then(|| json!({"k": "v"}));
        let map = json!({"metadata": {"name": name, "labels": labels}, "data": data});
        Ok(serde_json::from_value(map)?)
    };
    let refused = refusal(
        maps.create(&post, &map("guarded", Some("yes"), false)?)
            .await,
    );
    assert!(
        refused.contains("guarded ConfigMaps need data"),
        "{refused}"
    );
    maps.create(&post, &map("guarded-data", Some("yes"), true)?)
        .await?;
    maps.create(&post, &map("guarded-no", Some("no"), false)?)
        .await?;
    maps.create(&post, &map("unguarded", None, false)?).await?;

    op.shutdown().await;
    remove_configurations(&name).await?;
    ns.cleanup().await?;
    Ok(())
}

/// `POST path` with `body` over TLS, trusting only `ca` (PEM); the status and the body.
async fn post_raw(port: u16, ca: &[u8], path: &str, body: &[u8]) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tls = kopf_tests::webhook_tls(port, ca).await?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await?;
    // A server that refuses early may close before the whole body is sent.
    let _sent = tls.write_all(body).await;
    let mut response = Vec::new();
    let _read = tls.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response).into_owned();
    let code = (response.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((code, body))
}

#[tokio::test]
async fn bodies_that_are_not_reviews_are_refused_clearly_and_the_server_serves_on()
-> anyhow::Result<()> {
    let (ns, _api) = example_namespace().await?;
    let name = format!("wh-{}", ns.name());
    let op = webhook_operator(&name, ns.name()).await?;
    let port = op.webhook_addr().expect("a webhook server").port();
    let secrets: Api<Secret> = ns.api();
    let ca = secrets.get("wh-ca").await?.data.unwrap_or_default()["ca.crt"]
        .0
        .clone();

    let (code, body) = post_raw(port, &ca, "/validate/wh-field", b"{not json").await?;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("is not an AdmissionReview"), "{body}");
    let empty = br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#;
    let (code, body) = post_raw(port, &ca, "/validate/wh-field", empty).await?;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("has no request"), "{body}");
    let (code, body) = post_raw(port, &ca, "/validate/nobody", empty).await?;
    assert_eq!(code, 404, "{body}");
    let huge = vec![b' '; 8 * 1024 * 1024];
    let (code, body) = post_raw(port, &ca, "/validate/wh-field", &huge).await?;
    assert_eq!(code, 413, "{body}");

    // After all that, a real review is answered: the server did not fall over.
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1", "kind": {"group": "kopf.dev", "version": "v1", "kind": "KopfExample"},
            "resource": {"group": "kopf.dev", "version": "v1", "resource": "kopfexamples"},
            "name": "x", "namespace": ns.name(), "operation": "CREATE", "userInfo": {},
            "object": {"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
                       "metadata": {"name": "x"}, "spec": {"field": "forbidden"}},
        }
    });
    let (code, body) = post_raw(
        port,
        &ca,
        "/validate/wh-field",
        review.to_string().as_bytes(),
    )
    .await?;
    assert_eq!(code, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(answer["response"]["uid"], "u-1");
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 403);

    op.shutdown().await;
    remove_configurations(&name).await?;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn admission_handlers_without_a_server_or_unknown_ones_stop_the_start() -> anyhow::Result<()>
{
    let config = test_config().await?;
    let refused = Operator::builder()
        .kube_config(config.clone())
        .start()
        .await;
    let message = refused.expect_err("no webhook server").to_string();
    assert!(message.contains("no webhook server"), "{message}");
    assert!(
        message.contains("wh-field") && message.contains("wh-slow-fail"),
        "{message}"
    );

    let unknown = Webhooks::url("https://127.0.0.1:1").handlers(["wh-field", "nope"]);
    let refused = Operator::builder()
        .kube_config(config)
        .webhooks(unknown)
        .start()
        .await;
    let message = refused.expect_err("an unknown handler").to_string();
    assert!(
        message.contains("`nope`") && message.contains("wh-stamp"),
        "{message}"
    );
    Ok(())
}

/// A CA, and serving certificates for 127.0.0.1 signed by it (PEM).
struct TestCa {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    fn new() -> anyhow::Result<Self> {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let pem = params.self_signed(&key)?.pem();
        Ok(Self {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        })
    }

    /// Writes a new serving certificate, its chain and key into `dir` as a mounted
    /// `kubernetes.io/tls` Secret has them, each file replaced at once; returns its DER.
    fn write_serving(&self, dir: &std::path::Path) -> anyhow::Result<Vec<u8>> {
        let key = rcgen::KeyPair::generate()?;
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])?
            .signed_by(&key, &self.issuer)?;
        for (file, text) in [
            ("ca.crt", self.pem.clone()),
            ("tls.key", key.serialize_pem()),
            ("tls.crt", cert.pem() + &self.pem),
        ] {
            let staged = dir.join(format!(".{file}.new"));
            std::fs::write(&staged, text)?;
            std::fs::rename(&staged, dir.join(file))?;
        }
        Ok(cert.der().to_vec())
    }
}

/// The certificate the server on `port` presents now (DER), trusting `ca` (PEM).
async fn presented(port: u16, ca: &str) -> anyhow::Result<Vec<u8>> {
    let tls = kopf_tests::webhook_tls(port, ca.as_bytes()).await?;
    let (_, session) = tls.get_ref();
    let leaf = session.peer_certificates().and_then(|c| c.first());
    Ok(leaf.map(|c| c.to_vec()).unwrap_or_default())
}

#[tokio::test]
async fn certificates_from_files_are_rotated_without_a_failed_admission() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let name = format!("wh-{}", ns.name());
    let dir = std::env::temp_dir().join(format!("kopf-webhook-certs-{}", ns.name()));
    std::fs::create_dir_all(&dir)?;
    let ca = TestCa::new()?;
    let first = ca.write_serving(&dir)?;
    let port = free_port();
    let settings = Webhooks::url(format!("https://127.0.0.1:{port}"))
        .certificates_from(&dir)
        .handlers(["wh-field"]);
    let op = Operator::builder()
        .name(&name)
        .kube_config(test_config().await?)
        .namespaces([ns.name()])
        .webhooks(settings)
        .start()
        .await?;
    assert_eq!(presented(port, &ca.pem).await?, first);
    let post = PostParams::default();
    let deadline = Instant::now() + PROMPTLY;
    while api
        .create(&post, &example("probe", "forbidden"))
        .await
        .is_ok()
    {
        api.delete("probe", &DeleteParams::default()).await?;
        assert!(Instant::now() < deadline, "the webhook never took effect");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Admissions without a pause, while the files are replaced and reloaded: each one
    // allowed or refused as the handler says, none failed.
    let stop = tokio_util::sync::CancellationToken::new();
    let traffic = tokio::spawn({
        let (api, stop) = (api.clone(), stop.clone());
        async move {
            let (mut answered, mut failed) = (0_usize, Vec::new());
            while !stop.is_cancelled() {
                let refused = api.create(&post, &example("refused", "forbidden")).await;
                match refusal(refused) {
                    m if m.contains("must not be \"forbidden\"") => answered += 1,
                    other => failed.push(other),
                }
                let fine = format!("fine-{answered}");
                match api.create(&post, &example(&fine, "fine")).await {
                    Ok(_) => answered += 1,
                    Err(e) => failed.push(e.to_string()),
                }
                // Steady, not flooding the shared API server.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (answered, failed)
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = ca.write_serving(&dir)?;
    let rotated = Instant::now();
    let deadline = rotated + PROMPTLY;
    while presented(port, &ca.pem).await? != second {
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reloaded = rotated.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.cancel();
    let (answered, failed) = traffic.await?;
    assert!(
        failed.is_empty(),
        "{} failed admissions: {failed:?}",
        failed.len()
    );
    assert!(answered >= 10, "too little traffic to tell: {answered}");
    eprintln!("rotation: reloaded after {reloaded:?}; {answered} admissions, none failed");

    op.shutdown().await;
    remove_configurations(&name).await?;
    std::fs::remove_dir_all(&dir)?;
    ns.cleanup().await?;
    Ok(())
}
