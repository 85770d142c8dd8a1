"""Packaging facts: torch-free import, lazy API, fallback without the extension, in-place build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ptc_capture
from ptc_capture import build_ext

SRC_DIR = str(Path(ptc_capture.__file__).resolve().parent.parent)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=SRC_DIR)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)


def test_import_works_without_torch() -> None:
    proc = _run(
        "import sys; sys.modules['torch'] = None\n"
        "import ptc_capture, ptc_capture.framehook, ptc_capture.bytecode\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "print(sorted(ptc_capture.__all__))"
    )
    assert proc.returncode == 0, proc.stderr
    assert "optimize" in proc.stdout and "explain" in proc.stdout


def test_lazy_api_error_names_the_missing_piece() -> None:
    proc = _run(
        "import sys; sys.modules['torch'] = None; sys.modules['ptc_capture.api'] = None\n"
        "import ptc_capture\n"
        "try:\n    ptc_capture.optimize\nexcept ImportError as exc:\n    print('ERR', exc)\n"
        "try:\n    ptc_capture.not_a_name\nexcept AttributeError as exc:\n    print('ATTR', exc)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert "ERR ptc_capture.optimize needs ptc_capture.api" in proc.stdout
    assert "ATTR module 'ptc_capture' has no attribute 'not_a_name'" in proc.stdout


def test_missing_extension_leaves_package_importable_with_a_reason() -> None:
    proc = _run(
        "import sys; sys.modules['ptc_capture._framehook'] = None\n"
        "import ptc_capture\n"
        "from ptc_capture import framehook\n"
        "from ptc_capture.errors import FrameHookUnavailable\n"
        "assert framehook.available is False\n"
        "assert framehook.get_callback() is None and not framehook.is_installed()\n"
        "try:\n    framehook.set_callback(print)\nexcept FrameHookUnavailable as exc:\n    print(exc)\n"
    )
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.startswith("ptc_capture cannot capture frames: the ptc_capture._framehook C extension is not built")
    assert "\n" not in line and line.endswith(".")


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_build_ext_compiles_a_loadable_extension(tmp_path: Path) -> None:
    built = build_ext.build_extension(tmp_path)
    assert built.name == build_ext.extension_filename() and built.exists()
    proc = _run(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('ptc_capture._framehook', {str(built)!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "print(module.get_callback(), module.is_installed())"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "None False"
