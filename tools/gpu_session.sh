#!/usr/bin/env bash
# One device call: gpu tests of the packages (or the files named in GPU_TESTS), then tools/bench.py
# on WORKLOADS (ptc beside torch.compile, one process per cell). Logs under $OUT.
#   GPU_TESTS="packages/ptc/tests/test_export.py ..." WORKLOADS=bert-infer,gpt2-infer bash tools/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ptc-gpu}
mkdir -p "$OUT"
export PYTHONPATH=$(ls -d "$PWD"/packages/*/src | paste -sd:) PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 HF_HUB_OFFLINE=1
python3 -m ptc_capture.build_ext > /dev/null 2>&1 || echo "frame hook did not build"
if [ -n "${GPU_TESTS:-}" ]; then
  for t in $GPU_TESTS; do
    pkg=${t%%/tests/*}; file=${t#*/tests/}
    (cd "$pkg" && timeout "${TEST_TIMEOUT:-240}" python3 -m pytest "tests/$file" -q -p no:cacheprovider -m "${GPU_MARK:-gpu}" -x > "$OUT/test-$(basename "$file" .py).log" 2>&1)
    echo "$t: $(tail -1 "$OUT/test-$(basename "$file" .py).log")"
    grep -E "^(FAILED|ERROR)|Error" "$OUT/test-$(basename "$file" .py).log" | head -5
  done
fi
if [ -n "${WORKLOADS:-}" ]; then
  python3 tools/bench.py --workloads "$WORKLOADS" --impls "${IMPLS:-torch.compile,ptc}" --timeout "${BENCH_TIMEOUT:-200}" \
    --dtype "${DTYPE:-default}" --json "$OUT/bench.json" --markdown "$OUT/bench.md" > "$OUT/bench.log" 2>&1
  grep -E "^\|" "$OUT/bench.log" | head -30 || tail -20 "$OUT/bench.log"
fi
