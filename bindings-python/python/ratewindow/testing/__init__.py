"""Tools to check a store and run the shared vectors.

- :func:`check_store` gives a pytest class with one test per check of the conformance kit: the
  behaviour ``MemoryStore`` defines (the first seed's "Checking a store", plus the fixed window),
  for any store, sync or asyncio. :func:`run_checks` runs them and returns each outcome.
- :class:`ManualClock` times a ``MemoryStore`` by hand.
- :func:`run_vector_case` runs one case of ``tests/vectors``.
"""

from ._clock import ManualClock
from ._kit import CHECKS, StoreFactory, check_store, run_checks
from ._vectors import VectorMismatch, load_vector_file, run_vector_case

__all__ = [
    "CHECKS",
    "ManualClock",
    "StoreFactory",
    "VectorMismatch",
    "check_store",
    "load_vector_file",
    "run_checks",
    "run_vector_case",
]
