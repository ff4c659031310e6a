use super::*;

#[test]
fn a_url_gives_the_port_to_listen_on_and_the_name_to_serve() {
    assert_eq!(
        url_host_port("https://127.0.0.1:18443"),
        Some(("127.0.0.1".into(), 18443))
    );
    assert_eq!(
        url_host_port("https://op.example.com/"),
        Some(("op.example.com".into(), 443))
    );
    assert_eq!(
        url_host_port("https://[::1]:9443"),
        Some(("::1".into(), 9443))
    );
    assert_eq!(
        url_host_port("http://127.0.0.1:9443"),
        None,
        "plain HTTP is refused"
    );
    assert_eq!(
        url_host_port("https://127.0.0.1:9443/validate"),
        None,
        "no path"
    );
    let local = Webhooks::url("https://127.0.0.1:18443");
    assert_eq!(local.listen.port(), 18443);
    assert_eq!(local.serving_names(), ["127.0.0.1"]);
}

#[test]
fn a_service_is_served_under_its_dns_names_and_keeps_the_ca_in_its_namespace() {
    let hooks = Webhooks::service("ops", "hooks");
    assert_eq!(hooks.listen.port(), 9443);
    assert!(hooks.serving_names().contains(&"hooks.ops.svc".to_owned()));
    assert_eq!(
        hooks.ca_secret_of("backups"),
        ("ops".into(), "backups-webhook-ca".into())
    );
    let pinned = hooks.ca_secret("vault", "ca");
    assert_eq!(
        pinned.ca_secret_of("backups"),
        ("vault".into(), "ca".into())
    );
}

#[test]
fn webhook_names_are_dns_names_and_a_clash_is_refused() {
    assert_eq!(
        config::webhook_name("Check_Bucket", "backups"),
        "check-bucket.backups.kopf.dev"
    );
}

#[tokio::test(start_paused = true)]
async fn the_serving_certificate_is_renewed_from_the_same_ca_before_it_expires() {
    let ca = Authority::generate().unwrap();
    let names = vec!["127.0.0.1".to_owned()];
    let tls = CurrentTls::new(ca.serve(&names).unwrap());
    let first = tls.current();
    let stop = CancellationToken::new();
    let renewing = tokio::spawn(renew(ca, names, tls.clone(), stop.clone()));
    // Just before the renewal: the same configuration; just after: a new one.
    tokio::time::sleep(certs::SERVING_RENEWAL - Duration::from_secs(1)).await;
    assert!(Arc::ptr_eq(&first, &tls.current()), "renewed too early");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = tls.current();
    assert!(!Arc::ptr_eq(&first, &second), "not renewed");
    // And again one period later; the task ends with the server.
    tokio::time::sleep(certs::SERVING_RENEWAL).await;
    assert!(!Arc::ptr_eq(&second, &tls.current()));
    stop.cancel();
    renewing.await.unwrap();
    // The renewal is two thirds into the 90 days of validity: a month of margin.
    assert_eq!(certs::SERVING_RENEWAL, Duration::from_secs(60 * 24 * 3600));
}

#[test]
fn a_connect_handler_is_asked_about_its_subresources_of_the_kind() {
    use crate::Operation;
    use crate::handler::admission::{Pending, Request, Verdict, WebhookKind};
    use k8s_openapi::api::core::v1::Pod;
    fn allow(_: Request) -> Pending {
        Box::pin(async { Verdict::allow() })
    }
    let exec = WebhookRegistration::new::<Pod>(
        "no-shells",
        WebhookKind::Validating,
        &[Operation::Connect],
        allow,
    )
    .subresources(&["exec", "attach"]);
    let plain = WebhookRegistration::new::<Pod>(
        "pods",
        WebhookKind::Validating,
        &[Operation::Create],
        allow,
    );
    let address = Address::Url("https://127.0.0.1:9443".into());
    let common = config::Common {
        name: "op",
        address: &address,
        ca_bundle: "",
        namespaces: &[],
    };
    let (validating, _) = config::configurations(&common, &[exec, plain]);
    let rules = |i: usize| {
        let hooks = validating.webhooks.as_ref().unwrap();
        let rule = hooks[i].rules.as_ref().unwrap()[0].clone();
        (rule.resources.unwrap(), rule.operations.unwrap())
    };
    assert_eq!(
        rules(0),
        (
            vec!["pods/exec".into(), "pods/attach".into()],
            vec!["CONNECT".into()]
        )
    );
    assert_eq!(rules(1), (vec!["pods".into()], vec!["CREATE".into()]));
}
