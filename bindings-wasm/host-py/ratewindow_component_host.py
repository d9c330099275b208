"""A Python host for the ratewindow component, on the PyPI ``wasmtime`` package's component model.

``EngineWorld`` runs the component built for the pure ``engine`` world (the host passes ``now``);
``HostedWorld`` runs the one built for the ``hosted`` world, whose store reads this host's clock through
the imported ``ratewindow:engine/clock`` (``HostedWorld.clock_ms``). Both expose the operations of the
conformance vectors with the same signatures, so one runner drives either.

Results follow wasmtime's component values: a ``result<T, error>`` comes back as ``T`` or as a
``wasmtime.component.Variant`` (the ``error`` variant: ``tag`` ``invalid-limit`` and a record payload
with ``field`` and ``value``); :func:`ok` turns the latter into a :class:`ComponentError`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import wasmtime
from wasmtime import component as wc

__all__ = ["ComponentError", "EngineWorld", "HostedWorld", "Lock", "RedisStore", "component_dir", "limit", "ok", "verdict_json"]

PACKAGE = "ratewindow:engine"
VERSION = "0.2.0"


def component_dir() -> Path:
    """Where ``ratewindow-engine.wasm`` and ``ratewindow-hosted.wasm`` are."""
    env = os.environ.get("RATEWINDOW_COMPONENT_DIR")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "component" / "dist"


class ComponentError(Exception):
    """The component's ``error`` variant, raised by :func:`ok`."""

    def __init__(self, tag: str, payload: Any) -> None:
        self.tag = tag
        self.payload = payload
        if tag == "invalid-limit":
            self.field = payload.field
            self.value = payload.value
            super().__init__(f"invalid {payload.field}: {payload.value}")
        else:
            super().__init__(f"{tag}: {payload!r}")


def ok(value: Any) -> Any:
    """Unwraps a ``result``: the ok value, or raises the ``error`` variant as :class:`ComponentError`."""
    if isinstance(value, wc.Variant):
        raise ComponentError(value.tag, value.payload)
    return value


def limit(uses: float, window_ms: float) -> wc.Record:
    """A WIT ``limit`` record from the host's numbers (checked by the component, not here)."""
    r = wc.Record()
    setattr(r, "uses", float(uses))
    setattr(r, "window-ms", float(window_ms))
    return r


def verdict_json(v: Any, batch: bool = False) -> dict[str, Any]:
    """A ``verdict`` (or, with ``batch``, a ``batch-verdict``) record in the vectors' JSON shape."""
    out = {
        "allowed": v.allowed,
        "retry_after_ms": getattr(v, "retry-after-ms"),
        "retry_timestamp": getattr(v, "retry-timestamp"),
        "limit": v.limit,
        "remaining": v.remaining,
        "refill_after_ms": getattr(v, "refill-after-ms"),
        "reset_after_ms": getattr(v, "reset-after-ms"),
    }
    if batch:
        out["blocked"] = v.blocked
    return out


def entry(key: str, lim: wc.Record, cost: Optional[float] = None) -> wc.Record:
    """A WIT ``entry`` record (``cost`` None: the entry costs 1)."""
    r = wc.Record()
    setattr(r, "key", key)
    setattr(r, "limit", lim)
    setattr(r, "cost", None if cost is None else float(cost))
    return r


def gcra_limit(uses: float, window_ms: float, burst: Optional[float] = None) -> wc.Variant:
    """A WIT ``rate-limit.gcra`` (``burst`` None: ``uses``)."""
    r = wc.Record()
    setattr(r, "uses", float(uses))
    setattr(r, "window-ms", float(window_ms))
    setattr(r, "burst", None if burst is None else float(burst))
    return wc.Variant("gcra", r)


def counter_limit(uses: float, window_ms: float) -> wc.Variant:
    """A WIT ``rate-limit.counter``."""
    return wc.Variant("counter", limit(uses, window_ms))


def sliding_limit(uses: float, window_ms: float) -> wc.Variant:
    """A WIT ``mixed-limit.sliding`` (a mixed batch's sliding-log entry)."""
    return wc.Variant("sliding", limit(uses, window_ms))


def mixed_entry(key: str, lim: wc.Variant, cost: float = 1) -> wc.Record:
    """A WIT ``mixed-entry`` record."""
    r = wc.Record()
    setattr(r, "key", key)
    setattr(r, "limit", lim)
    setattr(r, "cost", float(cost))
    return r


@dataclass
class _Funcs:
    """The exported functions of one store interface."""

    constructor: wc.Func
    methods: dict[str, wc.Func]


def _interface(store: wasmtime.Store, instance: wc.Instance, name: str, funcs: list[str]) -> dict[str, wc.Func]:
    iface = instance.get_export_index(store, f"{PACKAGE}/{name}@{VERSION}")
    if iface is None:
        raise LookupError(f"the component does not export {name}")
    out = {}
    for f in funcs:
        idx = instance.get_export_index(store, f, iface)
        func = instance.get_func(store, idx) if idx is not None else None
        if func is None:
            raise LookupError(f"{name} has no {f}")
        out[f] = func
    return out


_METHODS = [
    "consume", "peek", "consume-many", "peek-many", "release", "hit", "hit-window", "attempt", "attempts",
    "too-many-attempts", "remaining", "available-in", "available-in-ms", "reset-attempts", "clear", "purge",
    "key-count", "consume-rate", "peek-rate", "reset-rate", "consume-mixed", "peek-mixed", "consume-cost", "peek-cost",
]

_REDIS_METHODS = [
    "consume", "peek", "consume-many", "peek-many", "release", "hit", "hit-window", "attempt", "attempts",
    "too-many-attempts", "remaining", "available-in", "available-in-ms", "reset-attempts", "clear",
    "consume-cost", "peek-cost",
]

#: The host's script runner: ``(script, sha1, keys, args)`` -> a ``store-io.reply`` (a
#: ``wasmtime.component.Variant``: ``Variant("array", [...])`` or ``Variant("value", x)``), or raises the
#: client's exception. An empty ``script`` means ``EVALSHA sha1``, else ``EVAL script``.
ScriptRunner = Callable[[str, str, list[str], list[str]], wc.Variant]


U64_MAX = 2**64 - 1
S64_MIN, S64_MAX = -(2**63), 2**63 - 1


def _u64(n: int) -> int:
    # wasmtime-py stores ints through ctypes, which wraps out-of-range values silently: refuse them.
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= U64_MAX:
        raise ValueError(f"expected a whole number of milliseconds from 0 to {U64_MAX}, got {n!r}")
    return n


def _s64(n: int) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or not S64_MIN <= n <= S64_MAX:
        raise ValueError(f"expected a whole number from {S64_MIN} to {S64_MAX}, got {n!r}")
    return n


class _World:
    """Shared plumbing: one instance, one current store resource, the release tokens it handed out."""

    timed: bool

    def __init__(self, file: str, linker_setup: Any = None) -> None:
        self.engine = wasmtime.Engine()
        self.store = wasmtime.Store(self.engine)
        component = wc.Component.from_file(self.engine, str(component_dir() / file))
        linker = wc.Linker(self.engine)
        if linker_setup is not None:
            linker_setup(linker)
        self.instance = linker.instantiate(self.store, component)
        limits = _interface(self.store, self.instance, "limits", ["check-limit", "check-window", "check-rate"])
        self._check_limit = limits["check-limit"]
        self._check_window = limits["check-window"]
        self._check_rate = limits["check-rate"]
        iface = "memory" if self.timed else "clocked-memory"
        funcs = _interface(
            self.store, self.instance, iface,
            ["[constructor]memory-store"] + [f"[method]memory-store.{m}" for m in _METHODS],
        )
        self._new = funcs["[constructor]memory-store"]
        self._m = {m: funcs[f"[method]memory-store.{m}"] for m in _METHODS}
        self.handle: Optional[wc.ResourceAny] = None
        self.tokens: dict[str, wc.ResourceAny] = {}

    def _at(self, now: int) -> tuple[int, ...]:
        raise NotImplementedError

    def _call(self, method: str, *args: Any, now: Optional[int] = None) -> Any:
        assert self.handle is not None, "call fresh_store first"
        extra = self._at(now) if now is not None else ()
        return self._m[method](self.store, self.handle, *args, *extra)

    def fresh_store(self) -> None:
        """Replaces the current store by an empty one, dropping the old one and its tokens."""
        for token in self.tokens.values():
            token.drop(self.store)
        self.tokens.clear()
        if self.handle is not None:
            self.handle.drop(self.store)
        self.handle = self._new(self.store)

    def check_limit(self, lim: wc.Record) -> Any:
        return self._check_limit(self.store, lim)

    def check_window(self, window_ms: float) -> Any:
        return self._check_window(self.store, float(window_ms))

    def check_rate(self, lim: wc.Variant) -> Any:
        return self._check_rate(self.store, lim)

    def consume(self, key: str, lim: wc.Record, now: int) -> Any:
        return self._call("consume", key, lim, now=now)

    def consume_cost(self, key: str, lim: wc.Record, cost: float, now: int) -> Any:
        """A sliding-log call costing ``cost`` uses (``consume-cost``)."""
        return self._call("consume-cost", key, lim, float(cost), now=now)

    def peek_cost(self, key: str, lim: wc.Record, cost: float, now: int) -> Any:
        return self._call("peek-cost", key, lim, float(cost), now=now)

    def consume_rate(self, key: str, lim: wc.Variant, cost: float, now: int) -> Any:
        """GCRA or the counter (``lim`` from :func:`gcra_limit` / :func:`counter_limit`)."""
        return self._call("consume-rate", key, lim, float(cost), now=now)

    def peek_rate(self, key: str, lim: wc.Variant, cost: float, now: int) -> Any:
        return self._call("peek-rate", key, lim, float(cost), now=now)

    def reset_rate(self, key: str, algorithm: str, now: int) -> None:
        """Forgets ``key``'s ``"gcra"`` bucket or ``"counter"``."""
        self._at(now)
        self._call("reset-rate", key, algorithm)

    def consume_mixed(self, entries: list[wc.Record], now: int, id: Optional[str] = None) -> Any:
        """The batch verdict of a mixed batch (or the error variant); a token kept under ``id``."""
        return self._keep(self._call("consume-mixed", entries, now=now), id)

    def peek_mixed(self, entries: list[wc.Record], now: int) -> Any:
        return self._call("peek-mixed", entries, now=now)

    def peek(self, key: str, lim: wc.Record, now: int) -> Any:
        return self._call("peek", key, lim, now=now)

    def consume_many(self, entries: list[wc.Record], now: int, id: Optional[str] = None) -> Any:
        """The batch verdict (or the error variant); an allowed call's token is kept under ``id``."""
        return self._keep(self._call("consume-many", entries, now=now), id)

    def _keep(self, r: Any, id: Optional[str]) -> Any:
        if isinstance(r, wc.Variant):
            return r
        token = r.release
        if token is not None:
            if id is not None:
                self.tokens[id] = token
            else:
                token.drop(self.store)
        return r.verdict

    def peek_many(self, entries: list[wc.Record], now: int) -> Any:
        return self._call("peek-many", entries, now=now)

    def release(self, id: str, now: int) -> None:
        token = self.tokens.get(id)
        if token is not None:
            self._call("release", token, now=now)
        else:
            self._at(now)

    def hit(self, key: str, decay_ms: float, amount: int, now: int) -> Any:
        return self._call("hit", key, float(decay_ms), _s64(amount), now=now)

    def hit_window(self, key: str, decay_ms: float, amount: int, now: int) -> Any:
        return self._call("hit-window", key, float(decay_ms), _s64(amount), now=now)

    def attempt(self, key: str, max: int, decay_ms: float, now: int) -> Any:
        return self._call("attempt", key, _s64(max), float(decay_ms), now=now)

    def attempts(self, key: str, now: int) -> int:
        return int(self._call("attempts", key, now=now))

    def too_many_attempts(self, key: str, max: int, now: int) -> bool:
        return bool(self._call("too-many-attempts", key, _s64(max), now=now))

    def remaining(self, key: str, max: int, now: int) -> int:
        return int(self._call("remaining", key, _s64(max), now=now))

    def available_in(self, key: str, now: int) -> int:
        return int(self._call("available-in", key, now=now))

    def available_in_ms(self, key: str, now: int) -> int:
        return int(self._call("available-in-ms", key, now=now))

    def reset_attempts(self, key: str, now: int) -> None:
        self._call("reset-attempts", key, now=now)

    def clear(self, key: str, now: int) -> None:
        self._at(now)
        self._call("clear", key)

    def key_count(self) -> int:
        return int(self._call("key-count"))


class EngineWorld(_World):
    """The component of the ``engine`` world: no imports; ``now`` crosses every call."""

    timed = True

    def __init__(self) -> None:
        super().__init__("ratewindow-engine.wasm")

    def _at(self, now: int) -> tuple[int, ...]:
        return (_u64(now),)


class HostedWorld(_World):
    """The component of the ``hosted`` world: its store reads ``clock_ms`` through the imported clock."""

    timed = False

    def __init__(self) -> None:
        self.clock_ms = 0
        self.clock_reads = 0
        # ``real_time``: ``now-ms`` reads the system clock and ``sleep-ms`` sleeps (a lock's ``block`` on a
        # real store); otherwise ``now-ms`` is ``clock_ms`` and ``sleep-ms`` moves it. Sleeps asked for are
        # kept in ``slept_ms``.
        self.real_time = False
        self.slept_ms: list[int] = []

        def now_ms(_store: Any) -> int:
            self.clock_reads += 1
            if self.real_time:
                return time.time_ns() // 1_000_000
            return self.clock_ms

        def sleep_ms(_store: Any, ms: int) -> None:
            self.slept_ms.append(ms)
            if self.real_time:
                time.sleep(ms / 1000)
            else:
                self.clock_ms += ms

        # `store-io`: the Redis store's scripts go to ``self.runner`` (the host's client); an exception it
        # raises goes back to the component's call machine as ``f"{type(e).__name__}: {e}"`` (so
        # redis-py's ``NoScriptError`` is recognised there; this host classifies nothing). Without a
        # runner, scripts fail with ``self.no_client``. Give-backs that failed are collected in
        # ``self.give_back_failures``; call ids come from os.urandom.
        self.no_client = "this host has no Redis client"
        self.runner: Optional[ScriptRunner] = None
        self.give_back_failures: list[Any] = []

        def run_script(_store: Any, script: str, sha1: str, keys: list[str], args: list[str]) -> Any:
            if self.runner is None:
                return self.no_client
            try:
                return self.runner(script, sha1, keys, args)
            except Exception as e:  # the client's failure, whatever it is, is the machine's to read
                return f"{type(e).__name__}: {e}"

        def query(_store: Any, _statements: Any) -> str:
            return "this host has no SQL client"

        def random_bytes(_store: Any, n: int) -> bytes:
            return os.urandom(n)

        def give_back_failed(_store: Any, failure: Any) -> None:
            self.give_back_failures.append(failure)

        def setup(linker: wc.Linker) -> None:
            with linker.root() as root:
                with root.add_instance(f"{PACKAGE}/clock@{VERSION}") as clock:
                    clock.add_func("now-ms", now_ms)
                    clock.add_func("sleep-ms", sleep_ms)
                with root.add_instance(f"{PACKAGE}/store-io@{VERSION}") as io:
                    io.add_func("run-script", run_script)
                    io.add_func("query", query)
                    io.add_func("random-bytes", random_bytes)
                    io.add_func("give-back-failed", give_back_failed)

        super().__init__("ratewindow-hosted.wasm", setup)

    def _at(self, now: int) -> tuple[int, ...]:
        self.clock_ms = _u64(now)
        return ()

    def redis_store(
        self, prefix: Optional[str] = None, hash_tag_before: Optional[str] = None, evalsha: Optional[bool] = None,
    ) -> RedisStore:
        """A ``redis-store`` of this instance; its scripts run through :attr:`runner`."""
        return RedisStore(self, prefix, hash_tag_before, evalsha)

    def lock_on_memory(self, key: str, ttl: float, owner: Optional[str] = None) -> Lock:
        """``lock.on-memory`` on the current ``clocked-memory`` store (after :meth:`fresh_store`); raises
        :class:`ComponentError` for a refused argument."""
        assert self.handle is not None, "call fresh_store first"
        return Lock(self, "on-memory", self.handle, key, ttl, owner)

    def lock_on_redis(self, store: RedisStore, key: str, ttl: float, owner: Optional[str] = None) -> Lock:
        """``lock.on-redis`` on ``store``; raises :class:`ComponentError` for a refused argument."""
        return Lock(self, "on-redis", store.handle, key, ttl, owner)


class RedisStore:
    """The ``redis`` interface's ``redis-store`` of a :class:`HostedWorld`: every operation is the core's
    call machine inside the component; each script it sends goes to ``world.runner``.

    :meth:`call` takes a method's WIT name and its parameters in order (keys as ``str``, limits as
    :func:`limit` records, ``s64`` as ``int``, ``f64`` as ``float``) and returns the ``result``: the ok
    value, or the ``error`` variant.
    """

    def __init__(
        self, world: HostedWorld, prefix: Optional[str], hash_tag_before: Optional[str], evalsha: Optional[bool],
    ) -> None:
        self.world = world
        funcs = _interface(
            world.store, world.instance, "redis",
            ["[constructor]redis-store"] + [f"[method]redis-store.{m}" for m in _REDIS_METHODS],
        )
        self._m = {m: funcs[f"[method]redis-store.{m}"] for m in _REDIS_METHODS}
        options = wc.Record()
        setattr(options, "prefix", prefix)
        setattr(options, "hash-tag-before", hash_tag_before)
        setattr(options, "evalsha", evalsha)
        self.handle: wc.ResourceAny = funcs["[constructor]redis-store"](world.store, options)

    def call(self, method: str, *args: Any) -> Any:
        """Calls ``method`` (a WIT name, e.g. ``consume-many``) on this store."""
        return self._m[method](self.world.store, self.handle, *args)


_LOCK_METHODS = ["key", "owner-token", "ttl", "acquire", "block", "release", "force-release", "owner"]


class Lock:
    """A ``lock`` resource of a :class:`HostedWorld`: :meth:`call` takes a method's WIT name and its
    parameters and returns its value (a ``result`` unwrapped by :func:`ok`: the ``error`` variant raises
    :class:`ComponentError`)."""

    def __init__(
        self, world: HostedWorld, on: str, store: wc.ResourceAny, key: str, ttl: float, owner: Optional[str]
    ) -> None:
        self.world = world
        funcs = _interface(
            world.store, world.instance, "lock",
            ["[static]lock.on-memory", "[static]lock.on-redis"] + [f"[method]lock.{m}" for m in _LOCK_METHODS],
        )
        self._m = {m: funcs[f"[method]lock.{m}"] for m in _LOCK_METHODS}
        self.handle: wc.ResourceAny = ok(funcs[f"[static]lock.{on}"](world.store, store, key, float(ttl), owner))

    def call(self, method: str, *args: Any) -> Any:
        """Calls ``method`` (a WIT name, e.g. ``force-release``) on this lock, unwrapped by :func:`ok`."""
        return ok(self._m[method](self.world.store, self.handle, *args))

    def drop(self) -> None:
        """Drops the resource."""
        self.handle.drop(self.world.store)


class FastConsume:
    """``consume`` of the ``engine`` world without wasmtime-py's generic conversion.

    ``wasmtime.component.Func.__call__`` looks the function's type up through the C API on every call
    and walks it to convert each value (about 0.6 ms a call here). This builds the C values of this one
    signature directly (``borrow<memory-store>, string, limit, u64 -> result<verdict, error>``) and reads
    the verdict straight from the result, using the ``wasmtime._ffi`` layer of the pinned wasmtime 50.
    The error case falls back to the generic conversion, so it returns exactly what :meth:`consume`
    would. Calls ``__call__(key, uses, window_ms, now)`` -> ``(allowed, retry_after_ms,
    retry_timestamp)`` on the world's current store.
    """

    def __init__(self, world: EngineWorld) -> None:
        from ctypes import byref

        from wasmtime import _ffi as ffi

        self._ffi = ffi
        self._byref = byref
        self.world = world
        self.func = world._m["consume"]
        result_ty = self.func.type(world.store).result
        assert result_ty is not None
        self.result_ty = result_ty
        self.params = (ffi.wasmtime_component_val_t * 4)()

    def __call__(self, key: str, uses: float, window_ms: float, now: int) -> tuple[bool, int, Optional[int]]:
        ffi, byref, w, p = self._ffi, self._byref, self.world, self.params
        assert w.handle is not None, "call fresh_store first"
        p[0].kind = ffi.WASMTIME_COMPONENT_RESOURCE
        p[0].of.resource = ffi.wasmtime_component_resource_any_clone(w.handle.ptr())
        p[1].kind = ffi.WASMTIME_COMPONENT_STRING
        p[1].of.string = ffi.str_to_capi(key)
        rec = ffi.wasmtime_component_valrecord_t()
        ffi.wasmtime_component_valrecord_new_uninit(rec, 2)
        rec.data[0].name = ffi.str_to_capi("uses")
        rec.data[0].val.kind = ffi.WASMTIME_COMPONENT_F64
        rec.data[0].val.of.f64 = float(uses)
        rec.data[1].name = ffi.str_to_capi("window-ms")
        rec.data[1].val.kind = ffi.WASMTIME_COMPONENT_F64
        rec.data[1].val.of.f64 = float(window_ms)
        p[2].kind = ffi.WASMTIME_COMPONENT_RECORD
        p[2].of.record = rec
        p[3].kind = ffi.WASMTIME_COMPONENT_U64
        p[3].of.u64 = _u64(now)
        # A fresh result each call: the C API does not accept a result slot that held a deleted value.
        result = ffi.wasmtime_component_val_t()
        try:
            err = ffi.wasmtime_component_func_call(
                byref(self.func._func), w.store._context(), p, 4, byref(result), 1)
            if err:
                raise wasmtime.WasmtimeError._from_ptr(err)
        finally:
            for i in range(4):
                ffi.wasmtime_component_val_delete(byref(p[i]))
        r = result.of.result
        if not r.is_ok:
            ok(self.result_ty.convert_from_c(result))  # raises ComponentError, frees the result
        fields = r.val.contents.of.record.data
        retry_ts = fields[2].val.of.option
        out = (
            bool(fields[0].val.of.boolean),
            int(fields[1].val.of.u64),
            int(retry_ts.contents.of.u64) if retry_ts else None,
        )
        ffi.wasmtime_component_val_delete(byref(result))
        return out
