"""End-to-end tests always check every stage boundary through the serialized form."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("PTC_CHECK_BOUNDARIES", "1")


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    import ptc

    ptc.reset()
    yield
    ptc.reset()
