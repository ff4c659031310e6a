//! One admission review: read the body, find the handler by its path, run it within its time
//! and isolated from panics, and answer; or refuse a body that is not a review, clearly.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};

use crate::handler::admission::{Request, Verdict, WebhookRegistration};

/// The largest body accepted: an object and its old version, each up to the API server's
/// limit of about 3 MiB on a request, and the review around them.
pub(super) const MAX_BODY: usize = 7 * 1024 * 1024;

/// The handlers, by their path.
pub(super) type Handlers = Arc<HashMap<String, WebhookRegistration>>;

/// The routes: `POST /validate/<id>` and `POST /mutate/<id>`.
pub(super) fn router(handlers: Handlers) -> Router {
    Router::new()
        .route("/{kind}/{id}", post(review))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(handlers)
}

fn refuse(code: StatusCode, message: String) -> Response {
    tracing::warn!(
        status = code.as_u16(),
        "a webhook request was refused: {message}"
    );
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message + "\n",
    )
        .into_response()
}

async fn review(
    State(handlers): State<Handlers>,
    Path((kind, id)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let path = format!("/{kind}/{id}");
    let Some(handler) = handlers.get(&path).copied() else {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("no admission handler at {path}"),
        );
    };
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the AdmissionReview for {path} is larger than {MAX_BODY} bytes"),
            );
        }
        Err(rejection) => return refuse(rejection.status(), rejection.body_text()),
    };
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("the body sent to {path} is not an AdmissionReview: {e}"),
            );
        }
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(_) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("the AdmissionReview sent to {path} has no request"),
            );
        }
    };
    let template = AdmissionResponse::from(&request);
    let request = Request::new(request);
    let verdict = decide(handler, request).await;
    answer(template, verdict)
}

/// Runs the handler in a task of its own (a panic ends only it) within its time; a handler
/// that panics or takes too long gets the answer its failure policy says.
async fn decide(handler: WebhookRegistration, request: Request) -> Verdict {
    if !request.matches(handler.object_filters()) {
        return Verdict::allow();
    }
    let object = request.describe();
    let id = handler.id();
    // Answer a little before the API server gives up, so that the policy is ours to apply.
    let time = handler.timeout().saturating_sub(Duration::from_millis(500));
    let mut task = tokio::spawn(handler.call(request));
    let failure = match tokio::time::timeout(time, &mut task).await {
        Ok(Ok(verdict)) => {
            if !verdict.allowed {
                tracing::info!(handler = id, object = %object, code = verdict.code,
                    "refused: {}", verdict.message);
            }
            return verdict;
        }
        Ok(Err(join)) => format!("admission handler `{id}` failed on {object}: {join}"),
        Err(_) => {
            task.abort();
            format!(
                "admission handler `{id}` did not answer on {object} within {} s",
                time.as_secs_f32()
            )
        }
    };
    if handler.ignores_failures() {
        tracing::warn!(handler = id, object = %object, "{failure}; admitted (failure_policy = \"ignore\")");
        let mut verdict = Verdict::allow();
        verdict.warnings.push(format!("{failure}; admitted"));
        verdict
    } else {
        tracing::error!(handler = id, object = %object, "{failure}; refused (failure_policy = \"fail\")");
        Verdict::error(failure)
    }
}

/// The verdict as the review the API server reads.
fn answer(template: AdmissionResponse, verdict: Verdict) -> Response {
    let mut response = template;
    if !verdict.warnings.is_empty() {
        response.warnings = Some(verdict.warnings);
    }
    if !verdict.allowed {
        response = response.deny(verdict.message);
        response.result.code = verdict.code;
    } else if let Some(patch) = verdict.patch {
        response = match response.clone().with_patch(patch) {
            Ok(patched) => patched,
            Err(e) => {
                let mut refused = response.deny(format!("the patch cannot be serialised: {e}"));
                refused.result.code = 500;
                refused
            }
        };
    }
    match serde_json::to_vec(&response.into_review()) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the AdmissionReview cannot be serialised: {e}"),
        ),
    }
}
