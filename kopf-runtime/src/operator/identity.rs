//! The operator's name, and what is derived from it: its finalizer and its field manager.
//!
//! Two operators on one kind must not share a finalizer, or each removes the other's when it
//! no longer needs its own. So neither is a fixed default: both come from the operator's name
//! (given, or the binary's), and a finalizer given explicitly must be a qualified name.

use super::error::OperatorError;

/// The prefix of the finalizers derived from operator names.
pub(crate) const FINALIZER_PREFIX: &str = "kopf.dev/";

/// Who the operator is on the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The operator's name (a DNS-1123 label).
    pub(crate) name: String,
    /// The finalizer it puts on objects.
    pub(crate) finalizer: String,
    /// The field manager of its writes, and the controller named by its Events.
    pub(crate) field_manager: String,
}

impl Identity {
    /// Resolves the identity from the builder's options: an explicit finalizer and field manager
    /// win; otherwise both derive from the name (given, or the binary's).
    pub(crate) fn resolve(
        name: Option<&str>,
        finalizer: Option<&str>,
        field_manager: Option<&str>,
    ) -> Result<Self, OperatorError> {
        let name = match name {
            Some(name) => check_name(name)?.to_owned(),
            None => binary_name().ok_or_else(|| OperatorError::InvalidOption {
                option: "name",
                reason: "the binary's name gives no operator name; set one".to_owned(),
            })?,
        };
        let finalizer = match finalizer {
            Some(f) => check_finalizer(f)?.to_owned(),
            None => format!("{FINALIZER_PREFIX}{name}"),
        };
        let field_manager = field_manager.map_or_else(|| name.clone(), str::to_owned);
        Ok(Self {
            name,
            finalizer,
            field_manager,
        })
    }
}

fn invalid(option: &'static str, reason: String) -> OperatorError {
    OperatorError::InvalidOption { option, reason }
}

/// A name: a DNS-1123 label (lowercase letters, digits and `-`, 1 to 63 characters, starting
/// and ending with a letter or digit).
pub(crate) fn check_name(name: &str) -> Result<&str, OperatorError> {
    if is_dns_label(name) {
        Ok(name)
    } else {
        Err(invalid(
            "name",
            format!(
                "`{name}` is not a DNS-1123 label (1-63 lowercase letters, digits and `-`, \
                 starting and ending with a letter or digit)"
            ),
        ))
    }
}

/// A finalizer: a qualified name `prefix/name`, the prefix a DNS-1123 subdomain.
pub(crate) fn check_finalizer(finalizer: &str) -> Result<&str, OperatorError> {
    if is_qualified_name(finalizer) {
        Ok(finalizer)
    } else {
        Err(invalid(
            "finalizer",
            format!(
                "`{finalizer}` is not a qualified name such as `example.com/name` (a DNS \
                 subdomain, `/`, and 1-63 letters, digits, `-`, `_` or `.`)"
            ),
        ))
    }
}

/// An annotation prefix: a DNS-1123 subdomain followed by `/` (`example.com/`). The operator's
/// bookkeeping annotations are `<prefix><name>…`, so without a prefix of its own they could not
/// be told from the object's annotations: each write of them would count as a change, and
/// `on_update` would trigger itself forever.
pub(crate) fn check_annotation_prefix(prefix: &str) -> Result<&str, OperatorError> {
    let domain = prefix.strip_suffix('/').unwrap_or_default();
    if (1..=253).contains(&domain.len()) && domain.split('.').all(is_dns_label) {
        return Ok(prefix);
    }
    let what = if prefix.is_empty() {
        "an empty prefix".to_owned()
    } else {
        format!("`{prefix}`")
    };
    Err(invalid(
        "annotation_prefix",
        format!(
            "{what} is not an annotation prefix such as `example.com/` (a DNS subdomain and \
             `/`): the operator's own annotations must be told apart from the object's, or \
             each write of them would count as a change"
        ),
    ))
}

fn is_dns_label(s: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (1..=63).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && edge(s.chars().next())
        && edge(s.chars().last())
}

fn is_qualified_name(s: &str) -> bool {
    let Some((prefix, name)) = s.split_once('/') else {
        return false;
    };
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let name_ok = (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && alnum(name.chars().next())
        && alnum(name.chars().last());
    let prefix_ok = (1..=253).contains(&prefix.len()) && prefix.split('.').all(is_dns_label);
    name_ok && prefix_ok
}

/// The running binary's name as a DNS-1123 label: lowercased, every other character turned
/// into `-`, cut to 63 (`None` if nothing is left).
fn binary_name() -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    label_from(&exe.file_stem()?.to_string_lossy())
}

fn label_from(raw: &str) -> Option<String> {
    let mapped: String = raw
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let cut: String = mapped.trim_matches('-').chars().take(63).collect();
    let label = cut.trim_end_matches('-').to_owned();
    is_dns_label(&label).then_some(label)
}

/// Whether `finalizer` looks like another operator's that may serve the same kind: another
/// kopf-rs operator's (or this one's under an earlier name, or kopf-rs's old shared default
/// `kopf.dev/finalizer`), or Python kopf's.
pub(crate) fn is_foreign_kopf_finalizer(finalizer: &str, ours: &str) -> bool {
    finalizer != ours
        && (finalizer.starts_with(FINALIZER_PREFIX) || finalizer.starts_with("kopf.zalando.org/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_finalizer_and_field_manager_derive_from_the_name() {
        let id = Identity::resolve(Some("backup-operator"), None, None).unwrap();
        assert_eq!(id.finalizer, "kopf.dev/backup-operator");
        assert_eq!(id.field_manager, "backup-operator");
        let id = Identity::resolve(Some("b"), Some("example.com/b"), Some("mgr")).unwrap();
        assert_eq!(
            (id.finalizer.as_str(), id.field_manager.as_str()),
            ("example.com/b", "mgr")
        );
        let derived = Identity::resolve(None, None, None).unwrap();
        assert!(derived.finalizer.starts_with("kopf.dev/"), "{derived:?}");
    }

    #[test]
    fn names_and_finalizers_are_validated() {
        for bad in ["", "Backup", "-a", "a-", "a_b", &"a".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["a", "backup-operator", "op2", &"a".repeat(63)] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
        for bad in [
            "plain",
            "/name",
            "example.com/",
            "Example.com/x",
            "a..b/x",
            "x/-a",
            "x/a b",
        ] {
            assert!(check_finalizer(bad).is_err(), "{bad:?}");
        }
        for good in ["example.com/x", "kopf.dev/finalizer", "a.b.c/Name_1.x-y"] {
            assert!(check_finalizer(good).is_ok(), "{good:?}");
        }
        let err = Identity::resolve(Some("Bad"), None, None).unwrap_err();
        assert!(
            err.to_string().contains("`Bad` is not a DNS-1123 label"),
            "{err}"
        );
    }

    #[test]
    fn annotation_prefixes_are_a_domain_and_a_slash() {
        #[rustfmt::skip]
        let rows = [
            ("", false), ("/", false), ("kopf.dev", false), ("kopf.dev/op-", false),
            ("Kopf.dev/", false), ("a..b/", false), ("a/b/", false), ("-a.com/", false),
            ("kopf.dev/", true), ("example.com/", true), ("a/", true), ("ops.team-1.io/", true),
        ];
        for (prefix, ok) in rows {
            assert_eq!(check_annotation_prefix(prefix).is_ok(), ok, "{prefix:?}");
        }
        let too_long = format!("{}/", vec!["a".repeat(63); 4].join("."));
        assert!(check_annotation_prefix(&too_long).is_err());
        let err = check_annotation_prefix("").unwrap_err().to_string();
        assert!(
            err.starts_with("invalid operator option `annotation_prefix`: an empty prefix")
                && err.contains("would count as a change"),
            "{err}"
        );
    }

    #[test]
    fn a_binary_name_becomes_a_label() {
        assert_eq!(label_from("My_Operator").as_deref(), Some("my-operator"));
        assert_eq!(
            label_from("operator_faults-9f3a").as_deref(),
            Some("operator-faults-9f3a")
        );
        assert_eq!(label_from("__x__").as_deref(), Some("x"));
        assert_eq!(label_from(&"a".repeat(70)).map(|l| l.len()), Some(63));
        assert_eq!(label_from("___"), None);
    }

    #[test]
    fn foreign_finalizers_of_kopf_operators_are_recognised() {
        let ours = "kopf.dev/mine";
        assert!(is_foreign_kopf_finalizer("kopf.dev/finalizer", ours));
        assert!(is_foreign_kopf_finalizer("kopf.dev/other", ours));
        assert!(is_foreign_kopf_finalizer(
            "kopf.zalando.org/KopfFinalizerMarker",
            ours
        ));
        assert!(!is_foreign_kopf_finalizer(ours, ours));
        assert!(!is_foreign_kopf_finalizer("example.com/x", ours));
    }
}
