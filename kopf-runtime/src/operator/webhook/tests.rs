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
