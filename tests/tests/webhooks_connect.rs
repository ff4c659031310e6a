//! `connect` admission against the real API server: it asks a handler of
//! `operations(connect)` before it opens a connection to a pod's subresource, even before it
//! looks for the pod's node. So `kubectl exec` into a pod that no node runs (the test cluster
//! has none) shows the handler's refusal, and a command the handler admits goes on to the API
//! server's own refusal: "does not have a host assigned".

mod operator_common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Connect, Operator, Rejection, Webhooks, validate};
use kopf_tests::{free_port, kubectl, test_config};
use operator_common::*;
use serde_json::json;

/// No shells in pods (`kubectl exec`), and no input to a pod's `app` container (`kubectl
/// attach -i`); the message names the pod and what was asked.
#[validate(id = "wh-no-shells", operations(connect), subresources(exec, attach))]
fn no_shells(connect: Connect<Pod>) -> Result<(), Rejection> {
    let options = &connect.options;
    let program = options.command.first().map(String::as_str);
    if let Some(shell @ ("sh" | "bash")) = program {
        return Err(Rejection::new(format!(
            "no {shell} in pod {}/{}: run the command itself",
            connect.namespace.as_deref().unwrap_or_default(),
            connect.name
        )));
    }
    if connect.subresource == "attach"
        && options.stdin
        && options.container.as_deref() == Some("app")
    {
        return Err(Rejection::new("no input to the app container"));
    }
    Ok(())
}

/// What the API server says when it gets past admission to looking for the pod's node.
const NO_NODE: &str = "does not have a host assigned";

/// A pod that no node will run.
fn pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [
            {"name": "app", "image": "busybox", "command": ["sleep", "3600"]},
            {"name": "side", "image": "busybox", "command": ["sleep", "3600"]},
        ]},
    }))?)
}

/// `POST` to a subresource of pod `name` with `query`, as `kubectl attach` and `port-forward`
/// open their connections: the API server's message (they all fail here, one way or another).
async fn connect_to(ns: &str, name: &str, sub: &str, query: &str) -> anyhow::Result<String> {
    let uri = format!("/api/v1/namespaces/{ns}/pods/{name}/{sub}?{query}");
    let request = http::Request::post(uri).body(Vec::new())?;
    Ok(match client().await.request_text(request).await {
        Err(kube::Error::Api(status)) => status.message,
        other => format!("not refused: {other:?}"),
    })
}

#[tokio::test]
async fn exec_and_attach_are_asked_about_before_the_api_server_looks_for_the_node()
-> anyhow::Result<()> {
    init_test_logging();
    let (ns, _) = example_namespace().await?;
    let name = format!("whc-{}", ns.name());
    let settings = Webhooks::url(format!("https://127.0.0.1:{}", free_port()))
        .ca_secret(ns.name(), "whc-ca")
        .handlers(["wh-no-shells"]);
    let op = Operator::builder()
        .name(&name)
        .kube_config(test_config().await?)
        .namespaces([ns.name()])
        .webhooks(settings)
        .shutdown_timeout(Duration::from_secs(5))
        .start()
        .await?;
    let pods: kube::Api<Pod> = ns.api();
    pods.create(&Default::default(), &pod("p")?).await?;

    // The API server picks the configuration up within a moment: refused once it has.
    let exec = |program: &'static str| {
        let ns = ns.name().to_owned();
        async move { kubectl(&["-n", &ns, "exec", "p", "-c", "app", "--", program], "").await }
    };
    let deadline = Instant::now() + PROMPTLY;
    let refused = loop {
        let (ok, out) = exec("sh").await?;
        assert!(!ok, "{out}");
        if !out.contains(NO_NODE) {
            break out;
        }
        assert!(
            Instant::now() < deadline,
            "the webhook never took effect: {out}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // kubectl shows the message verbatim, naming the pod.
    let expected = format!("no sh in pod {}/p: run the command itself", ns.name());
    assert!(
        refused.contains("denied the request") && refused.contains(&expected),
        "{refused}"
    );

    // Positive control: a command the handler admits reaches the API server's own check.
    let (ok, out) = exec("ls").await?;
    assert!(!ok && out.contains(NO_NODE), "{out}");

    // attach: the options (container, stdin) are the handler's to judge.
    let attach = |query| connect_to(ns.name(), "p", "attach", query);
    let refused = attach("container=app&stdin=true&stdout=true").await?;
    assert!(
        refused.contains("no input to the app container"),
        "{refused}"
    );
    let admitted = attach("container=side&stdin=true&stdout=true").await?;
    assert!(admitted.contains(NO_NODE), "{admitted}");
    // port-forward is not among the handler's subresources: the API server does not ask.
    let forwarded = connect_to(ns.name(), "p", "portforward", "ports=80").await?;
    assert!(forwarded.contains(NO_NODE), "{forwarded}");

    op.shutdown().await;
    kopf_tests::remove_webhook_configurations(&client().await, &name).await?;
    ns.cleanup().await?;
    Ok(())
}
