"""Sweep PyTorch's OpInfo database through ptc.compile and torch.compile, each compared with eager.

    python tools/opinfo_sweep.py                          # cpu, float32, one sample per op, both compilers
    python tools/opinfo_sweep.py --device cuda --dtype bfloat16 --samples 3 --json sweep.json
    python tools/opinfo_sweep.py --ops '^nn\\.functional\\.' --limit 50 --timeout 60
    python tools/opinfo_sweep.py --ptc-only --write-known-failures   # regenerate the CI test's list

Both compilers use fullgraph=True and backend="inductor". What is compared, how random ops are
treated and how verdicts are ranked is decided in packages/ptc/tests/opinfo_check.py, which
the CI test (packages/ptc/tests/test_opinfo_sweep.py) uses too; this tool imports it by path.

Isolation: worker subprocesses run the (op, compiler) pairs in order and report each as one
JSON line. Both compilers' caches are reset before every sample. A pair that runs past
--timeout, crashes the worker, or leaves the CUDA context unusable (checked with
torch.cuda.synchronize() after every pair) is recorded as an error and a fresh worker goes on
with the next pair, so one op cannot end or poison the sweep.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHECK_PATH = ROOT / "packages" / "ptc" / "tests" / "opinfo_check.py"
COMPILERS = ("ptc", "torch.compile")


def _load_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("opinfo_check", CHECK_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["opinfo_check"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _compiler(check: ModuleType, name: str) -> Any:
    import torch

    if name == "ptc":
        import ptc

        return check.Compiler(name, lambda fn: ptc.compile(fn, fullgraph=True, backend="inductor"), ptc.reset)
    import torch._dynamo

    return check.Compiler(name, lambda fn: torch.compile(fn, fullgraph=True, backend="inductor"), torch._dynamo.reset)


def _worker(args: argparse.Namespace) -> int:
    """Read ``op<TAB>compiler`` lines on stdin; print a start line and a result line for each."""
    import gc

    import torch

    # The same setting as ptc's integration tests: every stage boundary is round-tripped.
    os.environ.setdefault("PTC_CHECK_BOUNDARIES", "1")
    check = _load_check()
    dtype = check.DTYPES[args.dtype]
    ops = {check.op_id(op): op for op in check.select_ops(args.device, dtype, None)}
    compilers = {name: _compiler(check, name) for name in COMPILERS}
    # ptc.reset() runs gc.collect(); op_db's objects are frozen so it does not walk them each time.
    gc.freeze()
    for line in sys.stdin:
        name, compiler = line.rstrip("\n").split("\t")
        print(json.dumps({"start": name, "compiler": compiler}), flush=True)
        verdict = check.check_op(ops[name], args.device, dtype, compilers[compiler], args.samples)
        poisoned = False
        if args.device == "cuda":
            try:
                torch.cuda.synchronize()
            except Exception as exc:  # an asynchronous kernel fault surfaces here
                verdict = check.Verdict("error", f"CudaContextError: {str(exc).strip().splitlines()[0]}", verdict.seconds)
                poisoned = True
        result = {"status": verdict.status, "category": verdict.category, "detail": verdict.detail,
                  "seconds": round(verdict.seconds, 3)}
        print(json.dumps({"op": name, "compiler": compiler, "result": result}), flush=True)
        if poisoned:
            return 3
    return 0


def _lines(proc: subprocess.Popen[str], timeout: float) -> Iterator[str | None]:
    """The worker's stdout lines; None when no line came within ``timeout`` seconds."""
    assert proc.stdout is not None
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:
            yield None
            return
        line = proc.stdout.readline()
        if not line:
            return
        yield line


def _run_chunk(args: argparse.Namespace, pairs: list[tuple[str, str]], done: dict[str, dict[str, Any]]) -> None:
    """Run ``pairs`` in workers, restarting after a hang, crash or poisoned context."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--device", args.device,
               "--dtype", args.dtype, "--samples", str(args.samples)]
    while pairs:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        assert proc.stdin is not None
        proc.stdin.write("".join(f"{op}\t{c}\n" for op, c in pairs))
        proc.stdin.close()
        running: tuple[str, str] | None = None
        # The first op waits for the worker's imports (op_db, torch, ptc) as well.
        timeout = args.timeout + 120
        hung = False
        for line in _lines(proc, timeout):
            if line is None:
                hung = True
                break
            if args.deadline and time.monotonic() > args.deadline:
                os.killpg(proc.pid, 9)
                proc.wait()
                for op, compiler in pairs:
                    done.setdefault(op, {})[compiler] = {"status": "skipped", "category": "skipped",
                                                         "detail": "not run: the sweep reached --deadline", "seconds": None}
                return
            event = json.loads(line)
            if "start" in event:
                running = (event["start"], event["compiler"])
                timeout = args.timeout
                continue
            done.setdefault(event["op"], {})[event["compiler"]] = event["result"]
            pairs.remove((event["op"], event["compiler"]))
            running = None
            _progress(done)
        failed = running is not None
        if hung:
            os.killpg(proc.pid, 9)
            proc.wait()
            reason = f"Timeout: no result within {args.timeout:.0f} s"
        else:
            proc.wait()
            reason = f"WorkerCrash: the worker exited with code {proc.returncode}"
        if failed and running is not None:
            op, compiler = running
            done.setdefault(op, {})[compiler] = {"status": "error", "category": f"error: {reason.split(':')[0]}",
                                                 "detail": reason, "seconds": None}
            pairs.remove(running)
        elif pairs and proc.returncode != 3:
            raise RuntimeError(f"the sweep worker failed before its first op ({reason}); run it with --ops to see why")


def _progress(done: dict[str, dict[str, Any]]) -> None:
    if len(done) % 25 == 0:
        print(f"... {len(done)} ops", file=sys.stderr, flush=True)


def _summary(name: str, results: list[dict[str, Any]]) -> str:
    counts = {s: sum(1 for r in results if r["status"] == s) for s in ("pass", "wrong", "error", "skipped")}
    total = len(results) - counts["skipped"]
    return (f"{name}: {counts['pass']} passed, {counts['wrong']} wrong, {counts['error']} errors of {total} "
            f"({counts['skipped']} skipped)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--samples", type=int, default=1, help="samples per op (default 1)")
    parser.add_argument("--ops", help="regular expression over op ids (name.variant)")
    parser.add_argument("--limit", type=int, help="at most this many ops, in op_db order")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per op and compiler (default 300)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes in parallel (default 1)")
    parser.add_argument("--deadline", type=float, default=0,
                        help="seconds after which no further pair starts; the rest count as skipped (default: none)")
    parser.add_argument("--ptc-only", action="store_true", help="run ptc.compile only, not torch.compile")
    parser.add_argument("--json", help="write every result to this file")
    parser.add_argument("--write-known-failures", action="store_true",
                        help="replace this configuration's section of packages/ptc/tests/opinfo_known_failures.txt")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return _worker(args)
    if args.write_known_failures and (args.ops or args.limit):
        parser.error("--write-known-failures needs the whole op set: drop --ops and --limit")

    check = _load_check()
    import torch

    start = time.perf_counter()
    # From here on, --deadline is a point on the monotonic clock that every worker thread reads.
    args.deadline = time.monotonic() + args.deadline if args.deadline else 0
    names = [check.op_id(op) for op in check.select_ops(args.device, check.DTYPES[args.dtype], args.ops)]
    names = names[: args.limit] if args.limit else names
    compilers = COMPILERS[:1] if args.ptc_only else COMPILERS
    jobs = max(1, min(args.jobs, len(names)))
    # Each worker takes a contiguous run of ops so both compilers of one op stay in one process.
    per = -(-len(names) // jobs) if names else 0
    chunks = [[(n, c) for n in names[i: i + per] for c in compilers] for i in range(0, len(names), per or 1)]
    done: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(jobs) as pool:
        for future in [pool.submit(_run_chunk, args, chunk, done) for chunk in chunks]:
            future.result()
    seconds = time.perf_counter() - start

    print(f"OpInfo sweep: {len(names)} ops, device {args.device}, {args.dtype}, {args.samples} sample(s) per op, "
          f"torch {torch.__version__}, {seconds:.0f} s")
    for c in compilers:
        print(_summary(c, [done[n][c] for n in names]))
    ptc_failed = [n for n in names if done[n]["ptc"]["status"] in ("wrong", "error")]
    if "torch.compile" in compilers:
        worse = [n for n in ptc_failed if done[n]["torch.compile"]["status"] == "pass"]
        print(f"\nptc fails, torch.compile passes ({len(worse)}):")
        for n in worse:
            print(f"  {n:40s} {done[n]['ptc']['detail'][:150]}")
    wrong = [n for n in names if done[n]["ptc"]["status"] == "wrong"]
    print(f"\nptc wrong ({len(wrong)}):")
    for n in wrong:
        peer = f"  [torch.compile: {done[n]['torch.compile']['status']}]" if "torch.compile" in compilers else ""
        print(f"  {n:40s} {done[n]['ptc']['detail'][:150]}{peer}")

    if args.json:
        config = {"device": args.device, "dtype": args.dtype, "samples": args.samples, "torch": torch.__version__,
                  "seconds": round(seconds, 1), "compilers": list(compilers)}
        Path(args.json).write_text(json.dumps({"config": config, "ops": {n: done[n] for n in names}}, indent=1))
    if args.write_known_failures:
        verdicts = [(n, check.Verdict(done[n]["ptc"]["status"], done[n]["ptc"]["detail"])) for n in names]
        check.write_known_failures(check.section_name(args.device, args.dtype, args.samples), verdicts)
        print(f"\nwrote [{check.section_name(args.device, args.dtype, args.samples)}] of {check.KNOWN_FAILURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
