"""Hatchling build hook that compiles the ``ptc_capture._framehook`` C extension.

The compile step lives in ``src/ptc_capture/build_ext.py`` so that it can also run without pip
(``python -m ptc_capture.build_ext``). If compiling fails the wheel is built without the
extension and ``ptc_capture.framehook.available`` is False at run time.
"""

from __future__ import annotations

import importlib.util
import tempfile
import warnings
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

_HERE = Path(__file__).resolve().parent
_PKG = _HERE / "src" / "ptc_capture"


def _load_build_ext() -> Any:
    # Loaded by path: the package itself is not importable inside the isolated build env.
    spec = importlib.util.spec_from_file_location("_ptc_capture_build_ext", _PKG / "build_ext.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FrameHookBuildHook(BuildHookInterface[Any]):
    """Compile the frame hook and ship it as a platform-specific wheel."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        build_ext = _load_build_ext()
        editable = version == "editable"
        out_dir = _PKG if editable else Path(tempfile.mkdtemp(prefix="ptc_capture_ext_"))
        try:
            built = build_ext.build_extension(out_dir)
        except Exception as exc:  # noqa: BLE001 - any failure must still yield an importable wheel
            warnings.warn(
                f"ptc-capture: building the _framehook C extension failed; the wheel will not "
                f"capture frames ({exc})",
                stacklevel=1,
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if not editable:
            build_data["force_include"][str(built)] = f"ptc_capture/{built.name}"
