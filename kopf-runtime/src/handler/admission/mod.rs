//! Admission handlers: `#[validate]` and `#[mutate]` functions, what they are given
//! ([`Review`], the object; or [`Connect`]) and what they answer ([`Rejection`], [`Warnings`]).
//!
//! ```text
//!  AdmissionReview ──► Request::decode::<K>() ──► the handler ──► Verdict ──► AdmissionResponse
//!   (the API server)     (object, Review<K>)       (typed)        (allowed, message, patch)
//! ```
//!
//! The server that receives the reviews is the operator's (`operator::webhook`, feature
//! `webhook`); nothing here needs it, so the handlers are tested as plain functions.

mod answer;
mod connect;
mod registration;
mod request;
mod review;

pub use answer::{AdmissionReturn, Rejection, Warnings};
pub use connect::{Connect, ConnectOptions};
pub use k8s_openapi::api::authentication::v1::UserInfo;
pub use registration::{Pending, WebhookKind, WebhookRegistration};
pub use request::{Request, Verdict, mutated, snapshot, validated};
pub use review::{Operation, Review};

#[cfg(test)]
mod tests;
