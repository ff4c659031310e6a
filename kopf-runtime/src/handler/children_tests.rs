//! `Children`'s adoption rules and error mapping, without a server (the writes themselves are
//! tested against a real API server in `tests/tests/children_apply.rs`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};

use super::*;
use crate::core::outcome::ErrorKind;

fn client() -> kube::Client {
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
    kube::Client::try_from(config).expect("a client")
}

fn owner_cm(namespace: Option<&str>) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("app".into());
    cm.metadata.namespace = namespace.map(Into::into);
    cm.metadata.uid = Some("uid-1".into());
    cm.metadata.labels = Some([("team".into(), "a".into()), ("tier".into(), "web".into())].into());
    cm
}

fn children(namespace: Option<&str>) -> Children<ConfigMap> {
    Children::new(
        &owner_cm(namespace),
        client(),
        Arc::new(ChildWrites::new("op")),
    )
    .expect("an owner")
}

#[tokio::test]
async fn a_child_is_named_placed_owned_and_labelled_after_its_owner() {
    let children = children(Some("ns"));
    let mut child = ConfigMap::default();
    child.metadata.labels = Some([("tier".into(), "db".into())].into());
    let (ns, name) = children.adopt("config", &mut child).expect("adopted");
    assert_eq!((ns.as_deref(), name.as_str()), (Some("ns"), "app-config"));
    let meta = &child.metadata;
    assert_eq!(meta.name.as_deref(), Some("app-config"));
    assert_eq!(meta.namespace.as_deref(), Some("ns"));
    let labels = meta.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("team").map(String::as_str),
        Some("a"),
        "the owner's label"
    );
    assert_eq!(
        labels.get("tier").map(String::as_str),
        Some("db"),
        "the child's own wins"
    );
    let refs = meta.owner_references.clone().unwrap_or_default();
    assert_eq!(refs, vec![children.owner_reference()]);
    assert_eq!(refs[0].api_version, "v1");
    assert_eq!(
        (refs[0].kind.as_str(), refs[0].uid.as_str()),
        ("ConfigMap", "uid-1")
    );
    assert_eq!(
        (refs[0].controller, refs[0].block_owner_deletion),
        (Some(true), Some(true))
    );
    // Adopting again does not duplicate the reference; a name the child has is kept.
    child.metadata.name = Some("own-name".into());
    let (_, name) = children.adopt("", &mut child).expect("adopted again");
    assert_eq!(name, "own-name");
    assert_eq!(child.metadata.owner_references.map(|r| r.len()), Some(1));
}

#[tokio::test]
async fn scopes_and_controllers_that_do_not_fit_are_refused() {
    let namespaced = children(Some("ns"));
    let cluster = children(None);
    let in_ns = |ns: Option<&str>| {
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = ns.map(Into::into);
        cm
    };
    type Row<'a> = (
        &'a Children<ConfigMap>,
        Option<&'a str>,
        Result<Option<&'a str>, &'a str>,
    );
    #[rustfmt::skip]
    let rows: [Row<'_>; 6] = [
        (&namespaced, None,        Ok(Some("ns"))),
        (&namespaced, Some("ns"),  Ok(Some("ns"))),
        (&namespaced, Some("x"),   Err("only own children in its own namespace")),
        (&cluster,    Some("x"),   Ok(Some("x"))),
        (&cluster,    None,        Err("needs its namespace set")),
        (&cluster,    Some(""),    Err("needs its namespace set")),
    ];
    for (children, given, want) in rows {
        let got = children.adopt("c", &mut in_ns(given)).map(|(ns, _)| ns);
        match (got, want) {
            (Ok(ns), Ok(want)) => assert_eq!(ns.as_deref(), want, "{given:?}"),
            (Err(err), Err(want)) => {
                let text = err.to_string();
                assert!(text.contains(want) && text.contains("ConfigMap"), "{text}");
            }
            (got, want) => panic!("{given:?}: {got:?} against {want:?}"),
        }
    }
    // A cluster-scoped child of a namespaced owner would be deleted by the collector at once.
    let err = namespaced
        .adopt("c", &mut Namespace::default())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot belong to a namespaced owner"),
        "{err}"
    );
    // Another controller already owns the child.
    let mut taken = ConfigMap::default();
    let mut other = namespaced.owner_reference();
    other.uid = "uid-2".into();
    other.name = "rival".into();
    taken.metadata.owner_references = Some(vec![other]);
    let err = namespaced.adopt("c", &mut taken).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ConfigMap ns/app-c cannot be a child of ConfigMap ns/app: it names another controller, \
         ConfigMap rival"
    );
}

fn api_error(code: u16, retry_after: Option<u32>) -> ChildError {
    let mut status = serde_json::json!({
        "status": "Failure", "message": format!("the message of {code}"), "reason": "Reason",
        "code": code,
    });
    if let Some(seconds) = retry_after {
        status["details"] = serde_json::json!({ "retryAfterSeconds": seconds });
    }
    let source: kube::core::Status = serde_json::from_value(status).expect("a status");
    ChildError::Api {
        child: "ConfigMap ns/app-config".into(),
        owner: "App ns/app".into(),
        source: kube::Error::Api(Box::new(source)),
    }
}

#[test]
fn api_errors_map_to_handler_errors() {
    let s = Duration::from_secs;
    #[rustfmt::skip]
    let rows = [
        (409, None,    ErrorKind::Temporary { delay: s(1) }),
        (429, Some(7), ErrorKind::Temporary { delay: s(7) }),
        (429, None,    ErrorKind::Temporary { delay: s(5) }),
        (503, None,    ErrorKind::Temporary { delay: s(5) }),
        (500, Some(2), ErrorKind::Temporary { delay: s(2) }),
        (422, None,    ErrorKind::Permanent),
        (403, None,    ErrorKind::Other),
        (404, None,    ErrorKind::Other),
    ];
    for (code, after, kind) in rows {
        let err = api_error(code, after);
        assert_eq!(err.status_code(), Some(code));
        let handler: HandlerError = err.into();
        assert_eq!(handler.kind(), kind, "{code}");
        assert_eq!(
            handler.to_string(),
            format!(
                "cannot write ConfigMap ns/app-config (a child of App ns/app): {code} (Reason): \
                 the message of {code}"
            )
        );
    }
}
