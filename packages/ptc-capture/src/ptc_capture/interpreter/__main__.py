"""``python -m ptc_capture.interpreter``: list the bytecode handlers and the resumable breaks."""

from __future__ import annotations

import dis
import sys

from ptc_capture.interpreter.loop import HANDLERS
from ptc_capture.resume import NATIVE


def main() -> int:
    """Write one line per opname of this Python: handled, resumable after a break, or neither."""
    for name in sorted(dis.opmap):
        state = "traced" if name in HANDLERS else "unsupported"
        if name in NATIVE:
            state += ", resumable break"
        sys.stdout.write(f"{name:32} {state}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
