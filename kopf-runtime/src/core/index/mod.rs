//! Indexes: what an indexing function makes of every object of a kind, kept by key, so that
//! handlers look objects up ("the pods of this owner") without an API call.
//!
//! ```text
//!  watch: an object's version ──► Store::replace(object, pairs) ─┐
//!         its deletion        ──► Store::remove(object)          ├─► key → object → [values]
//!         a relist            ──► Store::resync(every object)    ┘
//! ```
//!
//! [`store`] is pure data: whoever owns one applies a kind's watch events to it under a lock it
//! never holds across an `.await`, and readers see it between two events, never halfway.

pub(crate) mod store;

#[cfg(test)]
mod store_proptest;
