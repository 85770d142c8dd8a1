"""Fixtures of the ptc_capture tests."""

from __future__ import annotations

from typing import Any

import pytest


def _ensure_extension() -> None:
    # A source checkout has no compiled frame hook until someone builds it; build it in place
    # (as ``python -m ptc_capture.build_ext`` would) so the hook tests run instead of skipping.
    try:
        import ptc_capture._framehook  # noqa: F401
    except ImportError:
        from ptc_capture import build_ext

        try:
            build_ext.build_extension()
        except Exception:  # no compiler: the hook tests skip with the reason
            pass


_ensure_extension()

from ptc_capture_testing import CountingBackend  # noqa: E402


@pytest.fixture
def backend() -> CountingBackend:
    return CountingBackend()


@pytest.fixture(autouse=True)
def _fresh_caches() -> Any:
    import ptc_capture

    ptc_capture.reset()
    yield
    ptc_capture.reset()
