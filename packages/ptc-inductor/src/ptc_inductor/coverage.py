"""Which ops of an op set have a loop-IR lowering, an extern mapping, or nothing."""

from __future__ import annotations

from dataclasses import dataclass

from .lowering import EXTERN_OPS, LOWERINGS


@dataclass(frozen=True, slots=True)
class Coverage:
    """Op names of a set, split by how ptc-inductor handles them."""

    lowered: tuple[str, ...]
    extern: tuple[str, ...]
    missing: tuple[str, ...]


def coverage(opset_name: str = "core/1") -> Coverage:
    """Report how every op of ``opset_name`` is handled."""
    import ptc_spec

    entries = ptc_spec.opset(opset_name)
    lowered, extern, missing = [], [], []
    for op in entries.ops:
        name = str(op)
        if op in EXTERN_OPS:
            extern.append(name)
        elif op in LOWERINGS:
            lowered.append(name)
        else:
            missing.append(name)
    return Coverage(tuple(sorted(lowered)), tuple(sorted(extern)), tuple(sorted(missing)))


def main() -> None:
    """Print the coverage table of core/1 (``python -m ptc_inductor.coverage``)."""
    import sys

    report = coverage()
    for title, names in (("lowered to loop IR", report.lowered), ("extern", report.extern), ("missing", report.missing)):
        sys.stdout.write(f"{title} ({len(names)}):\n")
        for n in names:
            sys.stdout.write(f"  {n}\n")


if __name__ == "__main__":
    main()
