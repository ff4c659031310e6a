use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DynamicObject;
use kube::core::admission::AdmissionReview;
use serde_json::json;

use super::*;

fn request(operation: &str, object: &serde_json::Value, old: &serde_json::Value) -> Request {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cm", "namespace": "ns", "operation": operation,
            "userInfo": {"username": "alice"}, "object": object, "oldObject": old,
            "dryRun": true,
        }
    });
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(review).unwrap();
    Request::new(review.request.unwrap())
}

fn map(data: &serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data})
}

#[test]
fn an_update_is_decoded_with_the_old_object_and_the_review() {
    let request = request("UPDATE", &map(&json!({"a": "2"})), &map(&json!({"a": "1"})));
    let (object, review) = request.decode::<ConfigMap>().unwrap();
    assert_eq!(object.data.unwrap()["a"], "2");
    assert_eq!(review.old.unwrap().data.as_ref().unwrap()["a"], "1");
    assert_eq!(review.operation, Operation::Update);
    assert_eq!(review.namespace.as_deref(), Some("ns"));
    assert_eq!(review.user.username.as_deref(), Some("alice"));
    assert!(review.dry_run);
}

#[test]
fn a_delete_gives_the_object_as_it_was_and_no_old_one() {
    let request = request("DELETE", &json!(null), &map(&json!({"a": "1"})));
    let (object, review) = request.decode::<ConfigMap>().unwrap();
    assert_eq!(object.data.unwrap()["a"], "1");
    assert!(review.old.is_none());
    assert_eq!(review.operation, Operation::Delete);
}

#[test]
fn an_object_of_the_wrong_shape_is_refused_naming_it_and_the_type() {
    let request = request("CREATE", &map(&json!(["not", "a", "map"])), &json!(null));
    let verdict = request.decode::<ConfigMap>().unwrap_err();
    assert!(!verdict.allowed);
    assert_eq!(verdict.code, 400);
    assert!(
        verdict.message.contains("configmaps ns/cm"),
        "{}",
        verdict.message
    );
    assert!(verdict.message.contains("ConfigMap"), "{}", verdict.message);
}

#[test]
fn a_create_without_an_object_is_refused() {
    let request = request("CREATE", &json!(null), &json!(null));
    let verdict = request.decode::<ConfigMap>().unwrap_err();
    assert!(
        verdict.message.contains("has no object"),
        "{}",
        verdict.message
    );
}

#[test]
fn a_rejection_keeps_its_message_and_code_and_warnings_pass_through() {
    let no = validated(Err::<(), _>(Rejection::new("bucket is empty").code(422)));
    assert_eq!(
        (no.allowed, no.code, no.message.as_str()),
        (false, 422, "bucket is empty")
    );
    let warned = validated(Ok::<_, Rejection>(Warnings::from_iter(["careful"])));
    assert!(warned.allowed);
    assert_eq!(warned.warnings, ["careful"]);
    assert_eq!(
        Rejection::new("x").code(99).status(),
        400,
        "codes are kept in 400–599"
    );
}

#[test]
fn a_mutation_becomes_the_patch_of_what_the_handler_changed_only() {
    let request = request("CREATE", &map(&json!({"a": "1"})), &json!(null));
    let (mut object, _) = request.decode::<ConfigMap>().unwrap();
    let before = snapshot(&object).unwrap();
    object
        .metadata
        .labels
        .get_or_insert_default()
        .insert("team".into(), "x".into());
    let verdict = mutated(&before, &object, ());
    let patch = serde_json::to_value(verdict.patch.unwrap()).unwrap();
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/metadata/labels", "value": {"team": "x"}}])
    );
    let unchanged = mutated(
        &before,
        &serde_json::from_value::<ConfigMap>(before.clone()).unwrap(),
        (),
    );
    assert!(unchanged.allowed && unchanged.patch.is_none());
    let refused = mutated(&before, &object, Err::<(), _>(Rejection::new("no")));
    assert!(!refused.allowed && refused.patch.is_none());
}

/// A `kubectl exec` into pod `p` of `ns`, as the API server sends it.
fn exec(options: &serde_json::Value) -> Request {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u2", "kind": {"group": "", "version": "v1", "kind": "PodExecOptions"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "exec", "name": "p", "namespace": "ns", "operation": "CONNECT",
            "userInfo": {"username": "bob"}, "object": options, "dryRun": false,
        }
    });
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(review).unwrap();
    Request::new(review.request.unwrap())
}

#[test]
fn a_connect_gives_the_subresource_and_the_options_not_an_object() {
    let options = json!({"apiVersion": "v1", "kind": "PodExecOptions",
        "command": ["sh", "-c", "id"], "container": "app", "stdin": true, "tty": true});
    let request = exec(&options);
    assert_eq!(request.operation(), Operation::Connect);
    assert_eq!(request.describe(), "pods/exec ns/p");
    let connect = request
        .connect::<k8s_openapi::api::core::v1::Pod>()
        .unwrap();
    assert_eq!(connect.subresource, "exec");
    assert_eq!(
        (connect.name.as_str(), connect.namespace.as_deref()),
        ("p", Some("ns"))
    );
    assert_eq!(connect.user.username.as_deref(), Some("bob"));
    assert_eq!(connect.options.command, ["sh", "-c", "id"]);
    assert_eq!(connect.options.container.as_deref(), Some("app"));
    assert!(connect.options.stdin && connect.options.tty && !connect.options.stdout);
    // A connect carries no object: a handler taking one refuses it, and filters see no labels.
    let verdict = request.decode::<ConfigMap>().unwrap_err();
    assert_eq!(verdict.code, 400);
    assert!(
        verdict.message.contains("Connect<K>"),
        "{}",
        verdict.message
    );
    assert!(request.matches(&crate::core::filter::Filters {
        labels: &[],
        annotations: &[],
        field: None,
    }));
}

#[test]
fn connect_options_of_the_wrong_shape_and_other_operations_are_refused_clearly() {
    let bad = exec(&json!({"kind": "PodExecOptions", "command": "not a list"}));
    let verdict = bad.connect::<ConfigMap>().unwrap_err();
    assert_eq!(verdict.code, 400);
    assert!(
        verdict.message.contains("pods/exec ns/p") && verdict.message.contains("do not decode"),
        "{}",
        verdict.message
    );
    let create = request("CREATE", &map(&json!({})), &json!(null));
    let verdict = create.connect::<ConfigMap>().unwrap_err();
    assert!(
        verdict.message.contains("not a CONNECT"),
        "{}",
        verdict.message
    );
}
