//! The suffixes of the framework's bookkeeping annotations, and recognising any kopf-rs
//! operator's bookkeeping whatever its prefix and name ([`is_bookkeeping`]): the essence leaves
//! it out (`core::essence`), and the keys of one operator are built from the same suffixes
//! (`core::keys`).

use serde_json::Value;

/// The suffix of the diff base's annotation.
pub(crate) const BASE_SUFFIX: &str = ".last-handled";
/// The suffix of the progress annotation.
pub(crate) const PROGRESS_SUFFIX: &str = ".progress";
/// The suffix of a cron timer's record.
pub(crate) const CRON_SUFFIX: &str = ".cron";

/// Whether an annotation looks like the bookkeeping of a kopf-rs operator, whatever its prefix
/// and name: a `….progress` or `….last-handled` holding a versioned JSON object, or a `….cron`
/// holding a time. Such annotations are never part of the essence, so that operators with other
/// prefixes on the same kind do not see each other's bookkeeping as changes.
#[must_use]
pub(crate) fn is_bookkeeping(key: &str, value: &Value) -> bool {
    let name = key.rsplit('/').next().unwrap_or(key);
    let Some(text) = value.as_str() else {
        return false;
    };
    if name.ends_with(PROGRESS_SUFFIX) || name.ends_with(BASE_SUFFIX) {
        let text = text.trim();
        return text.starts_with('{') && text.ends_with('}') && text.contains("\"v\":");
    }
    name.ends_with(CRON_SUFFIX) && text.parse::<jiff::Timestamp>().is_ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn bookkeeping_is_recognised_under_any_prefix() {
        let base = json!(r#"{"d":"0000000000000001","v":1}"#);
        let time = json!("2026-06-01T10:00:00Z");
        #[rustfmt::skip]
        let rows = [
            ("other.example.com/op.last-handled", &base, true),
            ("x.io/op.progress", &json!(r#"{"c":"update","h":{},"v":1}"#), true),
            ("op.last-handled", &base, true),
            ("x.io/op.backup.cron", &time, true),
            // Users' own annotations that only share a suffix, or a value shape.
            ("x.io/job.progress", &json!("50%"), false),
            ("x.io/job.cron", &json!("0 * * * *"), false),
            ("x.io/op.last-handled", &json!(1), false),
            ("x.io/notes", &base, false),
        ];
        for (key, value, want) in rows {
            assert_eq!(is_bookkeeping(key, value), want, "{key}");
        }
    }
}
