//! Daemons and timers, one handler kind on the supervisor's core (`run/`): an instance per
//! (object, handler), spawned by `task`, looping in `daemon` or `timer` (a cron timer in
//! `cron`). The behaviour is documented in `docs/daemons.md` and `docs/timers.md`.

pub(crate) mod cron;
pub(crate) mod daemon;
pub(crate) mod task;
pub(crate) mod timer;
