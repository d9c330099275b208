"""Per-call cost of ``consume`` through the component in wasmtime-py (engine world, host passes now).

    .venv/bin/python bindings-wasm/host-py/bench.py [calls]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ratewindow_component_host import EngineWorld, FastConsume, limit  # noqa: E402


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    keys = [f"user:{i}" for i in range(100)]
    w = EngineWorld()
    w.fresh_store()
    lim = limit(10, 1000)

    consume = w._m["consume"]
    store, handle = w.store, w.handle
    for i in range(1000):
        consume(store, handle, keys[i % 100], lim, i)
    t = time.perf_counter()
    for i in range(calls):
        consume(store, handle, keys[i % 100], lim, 1000 + i)
    generic = (time.perf_counter() - t) / calls

    fast = FastConsume(w)
    w.fresh_store()
    fast = FastConsume(w)
    for i in range(1000):
        fast(keys[i % 100], 10, 1000, i)
    t = time.perf_counter()
    for i in range(calls):
        fast(keys[i % 100], 10, 1000, 1000 + i)
    quick = (time.perf_counter() - t) / calls
    print(f"wasmtime-py consume: {generic * 1e6:.1f} µs/call (generic Func.__call__), "
          f"{quick * 1e6:.1f} µs/call (FastConsume, cached types)")


if __name__ == "__main__":
    main()
