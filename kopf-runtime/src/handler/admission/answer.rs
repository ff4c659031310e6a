//! What a handler answers: a [`Rejection`], [`Warnings`], or nothing to say
//! ([`AdmissionReturn`]).

use std::fmt;

/// A refusal: the API server refuses the request and `kubectl` shows the message verbatim
/// (`admission webhook "..." denied the request: <message>`).
///
/// ```
/// use kopf_runtime::Rejection;
/// let no = Rejection::new("spec.bucket must not be empty").code(422);
/// assert_eq!(no.message(), "spec.bucket must not be empty");
/// assert_eq!(no.status(), 422);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    message: String,
    code: u16,
}

impl Rejection {
    /// A rejection with this message and the code `403 Forbidden`.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: 403,
        }
    }

    /// The HTTP status the API server answers its client with (default 403; 400–599).
    #[must_use]
    pub fn code(mut self, code: u16) -> Self {
        self.code = code.clamp(400, 599);
        self
    }

    /// The message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status.
    #[must_use]
    pub fn status(&self) -> u16 {
        self.code
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Rejection {}

/// Warnings for an admitted request: `kubectl` prints each as `Warning: <text>`.
///
/// ```
/// use kopf_runtime::{Rejection, Warnings};
/// fn check(replicas: u32) -> Result<Warnings, Rejection> {
///     let mut warnings = Warnings::default();
///     if replicas == 1 {
///         warnings.push("one replica has no redundancy");
///     }
///     Ok(warnings)
/// }
/// assert_eq!(check(1).unwrap().len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Warnings(Vec<String>);

impl Warnings {
    /// Adds a warning.
    pub fn push(&mut self, warning: impl Into<String>) {
        self.0.push(warning.into());
    }

    /// How many there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The warnings, in order.
    #[must_use]
    pub fn into_vec(self) -> Vec<String> {
        self.0
    }
}

impl<S: Into<String>> FromIterator<S> for Warnings {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        Self(iter.into_iter().map(Into::into).collect())
    }
}

/// What an admission handler may return: `()`, [`Warnings`], `Result<(), Rejection>` or
/// `Result<Warnings, Rejection>`.
///
/// ```
/// use kopf_runtime::{AdmissionReturn, Rejection, Warnings};
/// assert_eq!(().into_answer(), Ok(Warnings::default()));
/// assert!(Err::<(), _>(Rejection::new("no")).into_answer().is_err());
/// ```
pub trait AdmissionReturn {
    /// The warnings of an admitted request, or the rejection.
    ///
    /// # Errors
    /// The handler's [`Rejection`].
    fn into_answer(self) -> Result<Warnings, Rejection>;
}

impl AdmissionReturn for () {
    fn into_answer(self) -> Result<Warnings, Rejection> {
        Ok(Warnings::default())
    }
}

impl AdmissionReturn for Warnings {
    fn into_answer(self) -> Result<Warnings, Rejection> {
        Ok(self)
    }
}

impl AdmissionReturn for Result<(), Rejection> {
    fn into_answer(self) -> Result<Warnings, Rejection> {
        self.map(|()| Warnings::default())
    }
}

impl AdmissionReturn for Result<Warnings, Rejection> {
    fn into_answer(self) -> Result<Warnings, Rejection> {
        self
    }
}
