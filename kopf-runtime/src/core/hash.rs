//! The one stable hash: 64-bit FNV-1a, the same across builds, Rust versions and machines (it
//! names cron annotations that outlive the process, and it is the API server's shard hash).

use std::hash::Hasher as _;

/// The 64-bit FNV-1a hash of `bytes`.
pub(crate) fn fnv64(bytes: &[u8]) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(bytes);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_values() {
        assert_eq!(super::fnv64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
