//! The one stable hash: 64-bit FNV-1a, the same across builds, Rust versions and machines (it
//! names cron annotations that outlive the process, it is the API server's shard hash, and it
//! is the digest of the change handlers' diff base), and the canonical compact JSON (object keys
//! in sorted order) that a value is digested in ([`measure`], and the essence's digest).

use std::hash::Hasher as _;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

/// The 64-bit FNV-1a hash of `bytes`.
pub(crate) fn fnv64(bytes: &[u8]) -> u64 {
    let mut hasher = Fnv64::default();
    hasher.feed(bytes);
    hasher.finish()
}

/// A streaming 64-bit FNV-1a hash that also counts the bytes fed to it: an [`std::io::Write`]
/// sink, so a value serialised into it is hashed (and measured) without being buffered.
#[derive(Default)]
pub(crate) struct Fnv64 {
    hasher: fnv::FnvHasher,
    len: usize,
}

impl Fnv64 {
    /// Adds `bytes` to the hash.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.hasher.write(bytes);
        self.len = self.len.saturating_add(bytes.len());
    }

    /// The hash of everything fed so far.
    #[must_use]
    pub(crate) fn finish(&self) -> u64 {
        self.hasher.finish()
    }

    /// How many bytes were fed.
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl std::fmt::Debug for Fnv64 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fnv64")
            .field("hash", &format_args!("{:016x}", self.finish()))
            .field("len", &self.len)
            .finish()
    }
}

impl std::io::Write for Fnv64 {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.feed(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The longest annotation name (the part after the prefix's `/`) Kubernetes accepts.
const MAX_NAME: usize = 63;

/// The annotation `<prefix><name><suffix>`: when `name` and `suffix` together are longer than an
/// annotation name may be (63 characters), `name` is cut and made unique by its FNV-1a hash
/// (`<head>-<16 hex digits><suffix>`), so the key is stable across builds and processes.
pub(crate) fn annotation_key(prefix: &str, name: &str, suffix: &str) -> String {
    if name.len() + suffix.len() <= MAX_NAME {
        return format!("{prefix}{name}{suffix}");
    }
    let hash = fnv64(name.as_bytes());
    let keep = MAX_NAME.saturating_sub(suffix.len() + 17);
    let head: String = name.chars().take(keep).collect();
    format!("{prefix}{head}-{hash:016x}{suffix}")
}

/// The length of the compact JSON of `value` and its digest (keys in sorted order), in one walk.
#[must_use]
pub(crate) fn measure(value: &Value) -> (usize, u64) {
    let hash = hash_of(&Canon(value));
    (hash.len(), hash.finish())
}

/// Serialises `value` into an FNV-1a writer.
pub(crate) fn hash_of(value: &impl Serialize) -> Fnv64 {
    let mut writer = Fnv64::default();
    // Neither the writer nor a JSON value (string keys only) can fail; keep the hash distinct
    // if it ever did.
    if serde_json::to_writer(&mut writer, value).is_err() {
        writer.feed(b"\0");
    }
    writer
}

/// A map's entries in sorted key order: as stored when already sorted (serde_json's `Map` is
/// a `BTreeMap` in this workspace), else sorted into a vector of references.
pub(crate) enum Entries<'a> {
    /// Already sorted.
    InOrder(serde_json::map::Iter<'a>),
    /// Sorted here.
    Sorted(std::vec::IntoIter<(&'a String, &'a Value)>),
}

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a String, &'a Value);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::InOrder(iter) => iter.next(),
            Self::Sorted(iter) => iter.next(),
        }
    }
}

/// The entries of `map` in sorted key order.
pub(crate) fn entries(map: &Map<String, Value>) -> Entries<'_> {
    if map.keys().zip(map.keys().skip(1)).all(|(a, b)| a < b) {
        return Entries::InOrder(map.iter());
    }
    let mut sorted: Vec<_> = map.iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    Entries::Sorted(sorted.into_iter())
}

/// A value with object keys in sorted order.
pub(crate) struct Canon<'a>(pub(crate) &'a Value);

impl Serialize for Canon<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => Filtered {
                map,
                keep: |_: &str, _: &Value| true,
            }
            .serialize(serializer),
            Value::Array(items) => serializer.collect_seq(items.iter().map(Canon)),
            other => other.serialize(serializer),
        }
    }
}

/// An object's entries for which `keep` holds, in sorted order.
pub(crate) struct Filtered<'a, F> {
    /// The object.
    pub(crate) map: &'a Map<String, Value>,
    /// Which entries are kept.
    pub(crate) keep: F,
}

impl<F: Fn(&str, &Value) -> bool> Serialize for Filtered<'_, F> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(None)?;
        for (key, value) in entries(self.map).filter(|(key, value)| (self.keep)(key, value)) {
            out.serialize_entry(key, &Canon(value))?;
        }
        out.end()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn reference_values() {
        assert_eq!(fnv64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn the_writer_hashes_and_counts_in_pieces() {
        let mut writer = Fnv64::default();
        writer.write_all(b"ab").unwrap();
        writer.write_all(b"c").unwrap();
        writer.flush().unwrap();
        assert_eq!((writer.finish(), writer.len()), (fnv64(b"abc"), 3));
    }

    #[test]
    fn annotation_keys_fit_and_stay_distinct() {
        assert_eq!(
            annotation_key("kopf.dev/", "op", ".progress"),
            "kopf.dev/op.progress"
        );
        let long = "b".repeat(80);
        let key = annotation_key("kopf.dev/", &long, ".last-handled");
        let name = key.trim_start_matches("kopf.dev/");
        assert_eq!(name.len(), 63);
        assert!(name.ends_with(".last-handled"));
        assert_ne!(
            key,
            annotation_key("kopf.dev/", &"b".repeat(81), ".last-handled")
        );
    }
}
