//! The declarative filters of a [`HandlerSpec`](super::spec::HandlerSpec) (labels,
//! annotations, a field's value), and evaluating them against an object snapshot.
//! Kubernetes-free: it only reads the JSON body.

use serde_json::Value;

use super::object::ObjectState;

/// A filter on one label or annotation value.
#[derive(Debug, Clone, Copy)]
pub enum MetaFilter {
    /// The key is present with exactly this value.
    Equals(&'static str),
    /// The key is present, with any value.
    Present,
    /// The key is absent.
    Absent,
    /// A predicate of the value (`None` when absent).
    Predicate(fn(Option<&str>) -> bool),
}

/// A literal in a `field`/`value` filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JsonLiteral {
    /// A JSON string.
    Str(&'static str),
    /// A JSON integer.
    Int(i64),
    /// A JSON number with a fraction.
    Float(f64),
    /// A JSON boolean.
    Bool(bool),
}

/// A filter on the value at a field path.
#[derive(Debug, Clone, Copy)]
pub enum ValueFilter {
    /// The field is present (and not `null`).
    Present,
    /// The field is absent (or `null`).
    Absent,
    /// The field equals this literal.
    Equals(JsonLiteral),
    /// A predicate of the value (`None` when absent).
    Predicate(fn(Option<&serde_json::Value>) -> bool),
}

/// `field = "spec.a.b"` with an optional `value`: the path is split at dots at compile time.
#[derive(Debug, Clone, Copy)]
pub struct FieldFilter {
    /// The dotted path as written, for messages.
    pub path: &'static str,
    /// The path's segments.
    pub segments: &'static [&'static str],
    /// The condition on the value found there.
    pub value: ValueFilter,
}

/// The declarative filters of a handler (`when` is typed and lives on the handler itself).
#[derive(Debug, Clone, Copy, Default)]
pub struct Filters {
    /// Conditions on `metadata.labels`, all of which must hold.
    pub labels: &'static [(&'static str, MetaFilter)],
    /// Conditions on `metadata.annotations`, all of which must hold.
    pub annotations: &'static [(&'static str, MetaFilter)],
    /// A condition on a field of the body.
    pub field: Option<FieldFilter>,
}

impl Filters {
    /// Whether the object satisfies every label, annotation and field condition (an empty
    /// filter set matches everything).
    ///
    /// ```
    /// use kopf_runtime::engine::{Filters, MetaFilter, ObjectState};
    /// const FILTERS: Filters = Filters {
    ///     labels: &[("app", MetaFilter::Equals("web")), ("legacy", MetaFilter::Absent)],
    ///     annotations: &[],
    ///     field: None,
    /// };
    /// let obj = ObjectState::from_json(serde_json::json!({
    ///     "metadata": {"name": "a", "uid": "u", "labels": {"app": "web"}},
    /// })).unwrap();
    /// assert!(FILTERS.matches(&obj));
    /// ```
    #[must_use]
    pub fn matches(&self, object: &ObjectState) -> bool {
        self.labels
            .iter()
            .all(|(key, filter)| filter.matches(object.label(key)))
            && self
                .annotations
                .iter()
                .all(|(key, filter)| filter.matches(object.annotation(key)))
            && self
                .field
                .as_ref()
                .is_none_or(|field| field.matches(object))
    }

    /// Whether there are no conditions at all.
    ///
    /// ```
    /// assert!(kopf_runtime::engine::Filters::default().is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty() && self.field.is_none()
    }
}

impl MetaFilter {
    /// Whether a label or annotation value (`None`: the key is absent) satisfies the filter.
    ///
    /// ```
    /// use kopf_runtime::engine::MetaFilter;
    /// assert!(MetaFilter::Equals("x").matches(Some("x")));
    /// assert!(!MetaFilter::Equals("x").matches(None));
    /// assert!(MetaFilter::Present.matches(Some("")));
    /// assert!(MetaFilter::Absent.matches(None));
    /// assert!(MetaFilter::Predicate(|v| v.is_some_and(|v| v.starts_with('v'))).matches(Some("v2")));
    /// ```
    #[must_use]
    pub fn matches(&self, value: Option<&str>) -> bool {
        match *self {
            Self::Equals(expected) => value == Some(expected),
            Self::Present => value.is_some(),
            Self::Absent => value.is_none(),
            Self::Predicate(predicate) => predicate(value),
        }
    }
}

impl FieldFilter {
    /// Whether the value at this filter's path satisfies its condition.
    ///
    /// ```
    /// use kopf_runtime::engine::{FieldFilter, JsonLiteral, ObjectState, ValueFilter};
    /// const REPLICAS: FieldFilter = FieldFilter {
    ///     path: "spec.replicas",
    ///     segments: &["spec", "replicas"],
    ///     value: ValueFilter::Equals(JsonLiteral::Int(3)),
    /// };
    /// let obj = ObjectState::from_json(serde_json::json!({
    ///     "metadata": {"name": "a", "uid": "u"}, "spec": {"replicas": 3},
    /// })).unwrap();
    /// assert!(REPLICAS.matches(&obj));
    /// ```
    #[must_use]
    pub fn matches(&self, object: &ObjectState) -> bool {
        self.value.matches(object.field(self.segments))
    }
}

impl ValueFilter {
    /// Whether a field value (`None`: absent or `null`) satisfies the filter.
    ///
    /// ```
    /// use kopf_runtime::engine::{JsonLiteral, ValueFilter};
    /// use serde_json::json;
    /// assert!(ValueFilter::Present.matches(Some(&json!(false))));
    /// assert!(ValueFilter::Absent.matches(None));
    /// assert!(ValueFilter::Equals(JsonLiteral::Str("on")).matches(Some(&json!("on"))));
    /// ```
    #[must_use]
    pub fn matches(&self, value: Option<&Value>) -> bool {
        match *self {
            Self::Present => value.is_some(),
            Self::Absent => value.is_none(),
            Self::Equals(literal) => value.is_some_and(|v| literal.matches(v)),
            Self::Predicate(predicate) => predicate(value),
        }
    }
}

impl JsonLiteral {
    /// Whether a JSON value equals this literal. Numbers compare by value, so `Int(3)` equals
    /// both `3` and `3.0`.
    ///
    /// ```
    /// use kopf_runtime::engine::JsonLiteral;
    /// use serde_json::json;
    /// assert!(JsonLiteral::Int(3).matches(&json!(3.0)));
    /// assert!(JsonLiteral::Float(0.5).matches(&json!(0.5)));
    /// assert!(!JsonLiteral::Bool(true).matches(&json!("true")));
    /// ```
    #[must_use]
    pub fn matches(&self, value: &Value) -> bool {
        match *self {
            Self::Str(s) => value.as_str() == Some(s),
            Self::Bool(b) => value.as_bool() == Some(b),
            Self::Int(i) => {
                value.as_i64() == Some(i) || (!value.is_i64() && number_eq(value, i as f64))
            }
            Self::Float(f) => number_eq(value, f),
        }
    }
}

#[allow(clippy::float_cmp)] // exact equality is what a literal filter means
fn number_eq(value: &Value, expected: f64) -> bool {
    value.as_f64() == Some(expected)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(body: Value) -> ObjectState {
        ObjectState::from_json(body).expect("valid test object")
    }

    fn is_v2(value: Option<&str>) -> bool {
        value == Some("v2")
    }

    #[test]
    fn all_conditions_must_hold() {
        let filters = Filters {
            labels: &[
                ("app", MetaFilter::Equals("web")),
                ("version", MetaFilter::Predicate(is_v2)),
            ],
            annotations: &[("skip", MetaFilter::Absent)],
            field: Some(FieldFilter {
                path: "spec.enabled",
                segments: &["spec", "enabled"],
                value: ValueFilter::Equals(JsonLiteral::Bool(true)),
            }),
        };
        let good = json!({
            "metadata": {"name": "a", "uid": "u", "labels": {"app": "web", "version": "v2"}},
            "spec": {"enabled": true},
        });
        assert!(filters.matches(&object(good.clone())));

        let mut wrong_label = good.clone();
        wrong_label["metadata"]["labels"]["version"] = json!("v1");
        assert!(!filters.matches(&object(wrong_label)));

        let mut annotated = good.clone();
        annotated["metadata"]["annotations"] = json!({"skip": "yes"});
        assert!(!filters.matches(&object(annotated)));

        let mut disabled = good;
        disabled["spec"]["enabled"] = json!(false);
        assert!(!filters.matches(&object(disabled)));
    }

    #[test]
    fn null_field_counts_as_absent() {
        let field = FieldFilter {
            path: "spec.x",
            segments: &["spec", "x"],
            value: ValueFilter::Absent,
        };
        assert!(field.matches(&object(
            json!({"metadata": {"name": "a", "uid": "u"}, "spec": {"x": null}})
        )));
        assert!(!field.matches(&object(
            json!({"metadata": {"name": "a", "uid": "u"}, "spec": {"x": 0}})
        )));
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(JsonLiteral::Int(-2).matches(&json!(-2)));
        assert!(!JsonLiteral::Int(2).matches(&json!(2.5)));
        assert!(JsonLiteral::Float(2.0).matches(&json!(2)));
        assert!(!JsonLiteral::Str("2").matches(&json!(2)));
    }
}
