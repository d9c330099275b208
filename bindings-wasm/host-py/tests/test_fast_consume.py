"""FastConsume (the bench's direct-FFI consume) gives exactly what the generic call gives."""

from __future__ import annotations

import math

import pytest

from ratewindow_component_host import ComponentError, EngineWorld, FastConsume, limit, ok


def test_fast_consume_matches_the_generic_call() -> None:
    generic, fast_world = EngineWorld(), EngineWorld()
    generic.fresh_store()
    fast_world.fresh_store()
    fast = FastConsume(fast_world)
    for i in range(600):
        key, uses, window, now = f"k{i % 7}", 1 + i % 3, 50 + i % 5, i * 3
        v = ok(generic.consume(key, limit(uses, window), now))
        assert fast(key, uses, window, now) == (v.allowed, getattr(v, "retry-after-ms"), getattr(v, "retry-timestamp"))


@pytest.mark.parametrize(("uses", "window", "field"), [(math.nan, 1, "uses"), (1, -1, "window-ms")])
def test_fast_consume_raises_the_error_variant(uses: float, window: float, field: str) -> None:
    w = EngineWorld()
    w.fresh_store()
    fast = FastConsume(w)
    with pytest.raises(ComponentError) as info:
        fast("k", uses, window, 0)
    assert info.value.field == field
    assert fast("k", 1, 1000, 0) == (True, 0, None)
