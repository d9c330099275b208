"""Every case of every file in tests/vectors, run on MemoryStore with a manual clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ratewindow.testing import load_vector_file, run_vector_case

VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors"
FILES = sorted(VECTORS.glob("*.json"))
CASES = [(path, case) for path in FILES for case in load_vector_file(path)]


def test_vectors_exist() -> None:
    assert FILES, f"no vector files in {VECTORS}"


@pytest.mark.parametrize(("path", "case"), CASES, ids=[f"{p.stem}:{c['name']}" for p, c in CASES])
def test_vector(path: Path, case: dict[str, Any]) -> None:
    run_vector_case(case)
