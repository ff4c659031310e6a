//! What a handler kind keeps in the supervisor beyond its handlers' slots, stored without the
//! supervisor's state knowing its type: so the state holds no kind's machinery, and each kind
//! (the change handlers today, the reconcile handlers next) is a peer that keeps its own parts.
//!
//! ```text
//!  SupervisorCore.kinds: KindParts   one part per kind   (the change handlers' `Changes`)
//!  ObjectEntry.parts:    ObjectParts one part per kind   (one object's `ObjectChanges`)
//! ```

use std::any::Any;

use tokio::time::Instant;

use super::instance::InstanceShared;

/// What a handler kind keeps per object, in the object's entry.
pub(crate) trait ObjectPart: Any + Send {
    /// Whether a task of the kind runs for the object (then its entry is kept).
    fn busy(&self) -> bool;

    /// The handler the kind's task runs (or retries) for the object now, with the task's shared
    /// state and since when the handler's current cycle runs, for `/metrics` (default: none).
    fn running(&self) -> Option<(usize, &InstanceShared, Instant)> {
        None
    }
}

/// One object's parts, at most one per kind.
#[derive(Default)]
pub(crate) struct ObjectParts(Vec<Box<dyn ObjectPart>>);

impl ObjectParts {
    /// The part of type `T`, if the object has one.
    pub(crate) fn get<T: ObjectPart>(&self) -> Option<&T> {
        (self.0.iter()).find_map(|part| (&**part as &dyn Any).downcast_ref())
    }

    /// The part of type `T`, if the object has one, to change.
    pub(crate) fn get_mut<T: ObjectPart>(&mut self) -> Option<&mut T> {
        (self.0.iter_mut()).find_map(|part| (&mut **part as &mut dyn Any).downcast_mut())
    }

    /// Adds a part (of a type the object has none of).
    pub(crate) fn insert<T: ObjectPart>(&mut self, part: T) {
        debug_assert!(self.get::<T>().is_none(), "one part per kind");
        self.0.push(Box::new(part));
    }

    /// Whether some kind keeps a part for the object.
    pub(crate) fn any(&self) -> bool {
        !self.0.is_empty()
    }

    /// Whether a task of some kind runs for the object.
    pub(crate) fn busy(&self) -> bool {
        self.0.iter().any(|part| part.busy())
    }

    /// Each kind's part.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &dyn ObjectPart> {
        self.0.iter().map(|part| &**part)
    }
}

/// What handler kinds keep for the whole supervisor, at most one part per kind.
#[derive(Default)]
pub(crate) struct KindParts(Vec<Box<dyn Any + Send + Sync>>);

impl KindParts {
    /// The part of type `T`, if a kind keeps one.
    pub(crate) fn get<T: Any>(&self) -> Option<&T> {
        self.0.iter().find_map(|part| part.downcast_ref())
    }

    /// Adds a part (of a type there is none of).
    pub(crate) fn insert<T: Any + Send + Sync>(&mut self, part: T) {
        debug_assert!(self.get::<T>().is_none(), "one part per kind");
        self.0.push(Box::new(part));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Busy(bool);
    impl ObjectPart for Busy {
        fn busy(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn parts_are_found_by_type() {
        let mut parts = ObjectParts::default();
        assert!(!parts.any() && !parts.busy() && parts.get::<Busy>().is_none());
        parts.insert(Busy(false));
        assert!(parts.any() && !parts.busy());
        if let Some(part) = parts.get_mut::<Busy>() {
            part.0 = true;
        }
        assert!(parts.busy());
        let mut kinds = KindParts::default();
        kinds.insert(7_u32);
        assert_eq!(kinds.get::<u32>(), Some(&7));
        assert!(kinds.get::<u64>().is_none());
    }
}
