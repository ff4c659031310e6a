//! One admission request as a handler's code sees it, and the [`Verdict`] its answer becomes.

use std::any::type_name;
use std::sync::Arc;

use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation as WireOperation};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::answer::AdmissionReturn;
use super::connect::Connect;
use super::review::{Operation, Review};
use crate::core::filter::Filters;

/// An admission request, as the webhook server received it (shared by every handler it goes
/// to). The generated code decodes the object from it with [`Request::decode`].
#[derive(Debug, Clone)]
pub struct Request {
    inner: Arc<AdmissionRequest<DynamicObject>>,
}

impl Request {
    /// Wraps a request read off the wire.
    #[must_use]
    pub fn new(request: AdmissionRequest<DynamicObject>) -> Self {
        Self {
            inner: Arc::new(request),
        }
    }

    /// The operation.
    #[must_use]
    pub fn operation(&self) -> Operation {
        match self.inner.operation {
            WireOperation::Create => Operation::Create,
            WireOperation::Update => Operation::Update,
            WireOperation::Delete => Operation::Delete,
            WireOperation::Connect => Operation::Connect,
        }
    }

    /// The request as read.
    #[must_use]
    pub fn raw(&self) -> &AdmissionRequest<DynamicObject> {
        &self.inner
    }

    /// The object as `K` (on a delete, the object as it was) and the rest of the review.
    ///
    /// # Errors
    /// A [`Verdict`] refusing the request, naming the object and why it cannot be decoded.
    pub fn decode<K: DeserializeOwned>(&self) -> Result<(K, Review<K>), Verdict> {
        let request = &*self.inner;
        let operation = self.operation();
        let object = match operation {
            Operation::Delete => request.old_object.as_ref(),
            Operation::Connect => {
                return Err(Verdict::error(format!(
                    "the CONNECT request for {} carries no object: it is for handlers taking \
                     `Connect<K>`",
                    self.describe()
                ))
                .code(400));
            }
            _ => request.object.as_ref(),
        };
        let Some(object) = object else {
            return Err(Verdict::error(format!(
                "the {operation} request for {} has no object",
                self.describe()
            )));
        };
        let object: K = self.typed(object)?;
        let old = match (operation, &request.old_object) {
            (Operation::Update, Some(old)) => Some(Arc::new(self.typed(old)?)),
            _ => None,
        };
        let review = Review {
            operation,
            old,
            name: request.name.clone(),
            namespace: request.namespace.clone(),
            user: request.user_info.clone(),
            dry_run: request.dry_run,
        };
        Ok((object, review))
    }

    /// A CONNECT request as [`Connect<K>`]: the subresource, the connection's options.
    ///
    /// # Errors
    /// A [`Verdict`] refusing the request if it is not a CONNECT, or its options do not decode.
    pub fn connect<K>(&self) -> Result<Connect<K>, Verdict> {
        let request = &*self.inner;
        if self.operation() != Operation::Connect {
            return Err(Verdict::error(format!(
                "the {} request for {} is not a CONNECT: handlers taking `Connect<K>` are \
                 given only those",
                self.operation(),
                self.describe()
            ))
            .code(400));
        }
        let options = match &request.object {
            Some(options) => serde_json::to_value(options),
            None => Ok(serde_json::Value::Object(serde_json::Map::new())),
        };
        let subresource = request.sub_resource.clone().unwrap_or_default();
        let connect = options
            .and_then(|options| Connect::new(subresource, options))
            .map_err(|e| {
                Verdict::error(format!(
                    "the options of the CONNECT request for {} do not decode: {e}",
                    self.describe()
                ))
                .code(400)
            })?;
        Ok(connect.of(
            request.name.clone(),
            request.namespace.clone(),
            request.user_info.clone(),
            request.dry_run,
        ))
    }

    fn typed<K: DeserializeOwned>(&self, object: &DynamicObject) -> Result<K, Verdict> {
        serde_json::to_value(object)
            .and_then(serde_json::from_value)
            .map_err(|e| {
                Verdict::error(format!(
                    "{} does not decode as `{}`: {e}",
                    self.describe(),
                    type_name::<K>()
                ))
                .code(400)
            })
    }

    /// Whether the object (on a delete, the object as it was) has the labels and annotations
    /// `filters` asks for (its field condition, if any, is not looked at).
    #[must_use]
    pub fn matches(&self, filters: &Filters) -> bool {
        let request = &*self.inner;
        let object = match self.operation() {
            Operation::Delete => request.old_object.as_ref(),
            // The connection's options: no labels, no annotations.
            Operation::Connect => None,
            _ => request.object.as_ref(),
        };
        let Some(meta) = object.map(|o| &o.metadata) else {
            return filters.labels.is_empty() && filters.annotations.is_empty();
        };
        (filters.labels.iter()).all(|(key, f)| f.matches(entry(meta.labels.as_ref(), key)))
            && (filters.annotations.iter())
                .all(|(key, f)| f.matches(entry(meta.annotations.as_ref(), key)))
    }

    /// `<plural> <namespace>/<name>` (`<plural>/<subresource>` for one), for messages.
    #[must_use]
    pub fn describe(&self) -> String {
        let request = &*self.inner;
        let plural = match &request.sub_resource {
            Some(sub) if !sub.is_empty() => format!("{}/{sub}", request.resource.resource),
            _ => request.resource.resource.clone(),
        };
        match &request.namespace {
            Some(ns) => format!("{plural} {ns}/{}", request.name),
            None => format!("{plural} {}", request.name),
        }
    }
}

/// The value of `key` in a label or annotation map.
fn entry<'a>(
    map: Option<&'a std::collections::BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    map.and_then(|m| m.get(key)).map(String::as_str)
}

/// A handler's answer to one request: admitted (with warnings and, from a mutating handler, a
/// JSON patch) or refused with a message and an HTTP status.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Verdict {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// Why not (empty when admitted).
    pub message: String,
    /// The HTTP status of a refusal.
    pub code: u16,
    /// Warnings for the client.
    pub warnings: Vec<String>,
    /// The changes of a mutating handler (`None`: none).
    pub patch: Option<json_patch::Patch>,
}

impl Verdict {
    /// Admitted, nothing to say.
    #[must_use]
    pub fn allow() -> Self {
        Self {
            allowed: true,
            message: String::new(),
            code: 200,
            warnings: Vec::new(),
            patch: None,
        }
    }

    /// Refused with `message` and 403.
    #[must_use]
    pub fn deny(message: impl Into<String>, code: u16) -> Self {
        Self {
            allowed: false,
            message: message.into(),
            code,
            warnings: Vec::new(),
            patch: None,
        }
    }

    /// Refused because the handler could not run (500 unless [`Verdict::code`] says otherwise).
    #[must_use]
    pub fn error(message: impl Into<String>) -> Self {
        Self::deny(message, 500)
    }

    /// The same with another status.
    #[must_use]
    pub fn code(mut self, code: u16) -> Self {
        self.code = code;
        self
    }

    fn from_answer(answer: impl AdmissionReturn) -> Self {
        match answer.into_answer() {
            Ok(warnings) => Self {
                warnings: warnings.into_vec(),
                ..Self::allow()
            },
            Err(rejection) => Self::deny(rejection.message(), rejection.status()),
        }
    }
}

/// A validating handler's return value as a verdict.
#[must_use]
pub fn validated(answer: impl AdmissionReturn) -> Verdict {
    Verdict::from_answer(answer)
}

/// The object as a mutating handler was given it, to diff against what it made of it.
///
/// # Errors
/// A verdict naming the type that cannot be serialised.
pub fn snapshot<K: Serialize>(object: &K) -> Result<serde_json::Value, Verdict> {
    serde_json::to_value(object)
        .map_err(|e| Verdict::error(format!("`{}` cannot be serialised: {e}", type_name::<K>())))
}

/// A mutating handler's return value as a verdict: if admitted, with the JSON patch from
/// `before` to `after` (none if the handler changed nothing).
#[must_use]
pub fn mutated<K: Serialize>(
    before: &serde_json::Value,
    after: &K,
    answer: impl AdmissionReturn,
) -> Verdict {
    let mut verdict = Verdict::from_answer(answer);
    if !verdict.allowed {
        return verdict;
    }
    let after = match snapshot(after) {
        Ok(after) => after,
        Err(error) => return error,
    };
    let patch = json_patch::diff(before, &after);
    if !patch.0.is_empty() {
        verdict.patch = Some(patch);
    }
    verdict
}
