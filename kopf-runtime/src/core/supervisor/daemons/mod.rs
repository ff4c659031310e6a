//! Daemons and timers, one handler kind on the supervisor's core (`run/`): an instance per
//! (object, handler), spawned by `task`, looping in `daemon`, `timer` or `cron` (a timer with a
//! cron schedule): three sibling loops on `run/`, none importing another. The behaviour is
//! documented in `docs/daemons.md` and `docs/timers.md`.

pub(crate) mod cron;
pub(crate) mod daemon;
pub(crate) mod task;
pub(crate) mod timer;
