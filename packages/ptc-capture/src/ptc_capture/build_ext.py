"""Compile the ``_framehook`` C extension with the system C compiler, without pip or setuptools.

Run ``python -m ptc_capture.build_ext`` (or ``python path/to/build_ext.py``) to build the
extension next to this file, for development from a source checkout. The wheel build
(``hatch_build.py``) uses the same function.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

__all__ = ["SOURCE", "build_extension", "compiler", "extension_filename", "main"]

SOURCE = Path(__file__).with_name("_framehook.c")


def extension_filename() -> str:
    """Return the file name the extension must have for this interpreter (e.g. ``_framehook.cpython-312-x86_64-linux-gnu.so``)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return "_framehook" + suffix


def compiler(language: str = "c") -> list[str]:
    """The command of a C (``"c"``) or C++ (``"c++"``) compiler found on this machine."""
    # sysconfig's CC names the compiler CPython was built with, which may not exist here
    # (e.g. x86_64-linux-gnu-gcc on Debian without the cross alias); fall back to cc/gcc.
    variable, fallbacks = ("CC", ["cc", "gcc", "clang"]) if language == "c" else ("CXX", ["c++", "g++", "clang++"])
    candidates = []
    if os.environ.get(variable):
        candidates.append(shlex.split(os.environ[variable]))
    configured = sysconfig.get_config_var(variable)
    if configured:
        candidates.append(shlex.split(configured))
    candidates += [[name] for name in fallbacks]
    for cand in candidates:
        if cand and shutil.which(cand[0]):
            return cand
    raise RuntimeError(f"no {language} compiler found (tried ${variable}, sysconfig {variable}, {', '.join(fallbacks)})")


def build_extension(out_dir: Path | None = None, *, verbose: bool = False) -> Path:
    """Compile ``_framehook.c`` into ``out_dir`` (default: next to the source) and return the built file."""
    target_dir = Path(out_dir) if out_dir is not None else SOURCE.parent
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / extension_filename()
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").exists():
        raise RuntimeError(f"Python.h not found in {include} (install the Python development headers)")
    cmd = [
        *compiler(),
        "-shared",
        "-fPIC",
        "-O2",
        "-std=c11",
        "-Wall",
        "-fvisibility=hidden",
        f"-I{include}",
        str(SOURCE),
        "-o",
        str(target),
    ]
    if sys.platform == "darwin":
        cmd[1:1] = ["-undefined", "dynamic_lookup"]
    if verbose:
        sys.stderr.write(" ".join(cmd) + "\n")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {SOURCE.name} failed:\n{proc.stderr.strip()}")
    return target


def main() -> int:
    """Build in place and print the path of the built extension."""
    path = build_extension(verbose=True)
    sys.stdout.write(f"{path}\n")
    try:
        # The tensor-guard module needs torch's headers, and the package importable.
        from ptc_capture import tensormeta
    except ImportError:
        return 0

    built = tensormeta.module()
    sys.stdout.write(f"{tensormeta.built_path() if built is not None else tensormeta.unavailable_reason()}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
