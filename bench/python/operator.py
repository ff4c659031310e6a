"""The Python kopf arm of the kopf-rs benchmark (bench/README.md).

Run as: kopf run --standalone --namespace kopf-bench bench/python/operator.py
with BENCH_MODE (timers | daemons | timers-write) and BENCH_FIRES (the fire-log path).

The handlers match the kopf-rs arm (bench/src/bin/bench-kopf-rs.rs) line for line: same
resource, same handler id, same options left at their defaults (finalizers on), same body.
Each handler stamps its own fire-log line: `<unix ns> <F|T|S> <object name>`.
"""
import os
import time

import kopf

MODE = os.environ.get("BENCH_MODE", "timers")
_OUT = open(os.environ["BENCH_FIRES"], "a", buffering=1 << 16)
_LAST_FLUSH = [time.monotonic()]
FLUSH_EVERY = 0.25
RESOURCE = ("kopf.dev", "v1", "kopfexamples")


def record(tag: str, name: str) -> None:
    _OUT.write(f"{time.time_ns()} {tag} {name}\n")
    now = time.monotonic()
    if now - _LAST_FLUSH[0] >= FLUSH_EVERY:
        _OUT.flush()
        _LAST_FLUSH[0] = now


@kopf.on.cleanup()
async def flush_fire_log(**_):
    _OUT.flush()


if MODE == "timers":

    @kopf.timer(*RESOURCE, id="tick", interval=1.0)
    async def tick(name, **_):
        record("F", name)

elif MODE == "timers-write":

    @kopf.timer(*RESOURCE, id="tick", interval=1.0)
    async def tick(name, **_):
        record("F", name)
        return {"at": time.time_ns()}

elif MODE == "daemons":

    @kopf.daemon(*RESOURCE, id="tick")
    async def tick(name, stopped, **_):
        while not stopped:
            record("T", name)
            await stopped.wait(1.0)
        record("S", name)

else:
    raise SystemExit(f"unknown BENCH_MODE={MODE!r}")
