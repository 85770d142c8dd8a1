#!/usr/bin/env bash
# Everything the GPU machine checks, in one lease (it has Python 3.12, torch 2.11, triton 3.6
# and no pip): builds ptc-capture's frame hook in place, runs the capture suite on 3.12, the
# tests marked gpu of every package, then the GPU benchmarks. Logs go to $OUT (three files,
# within the device tool's limit of eight).
#   bash tools/gpu_check.sh [tests|bench|all]
#   bash tools/gpu_check.sh triton WORKLOAD [--compile] [--kernels]   # tools/profile_triton.py
#   bash tools/gpu_check.sh e2e [WORKLOADS]   # ptc.demo, then tools/bench.py on those workloads
#   bash tools/gpu_check.sh profile WORKLOAD [IMPLS]   # tools/profile_gpu.py's kernel tables
#   bash tools/gpu_check.sh compile   # cold-compile stage tables (tools/profile_compile.py; WORKLOADS=name:dynamic ...)
#   bash tools/gpu_check.sh dynamic   # dynamic shapes: capture suite, ptc's dynamic tests on cuda,
#                                     # tools/bench_dynamic.py --device cuda --kernels
#   bash tools/gpu_check.sh distributed   # 2 GPUs: tests/test_distributed.py -m gpu, then (BENCH_IMPLS=...) bench_distributed
#   bash tools/gpu_check.sh correctness [SECONDS]   # real models x precisions, the OpInfo sweep beside
#                                                   # torch.compile (float32, bf16) and the gpu tests, at once
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
OUT=${OUT:-/tmp/ptc-gpu}
mkdir -p "$OUT"
export PYTHONPATH=$(ls -d "$PWD"/packages/*/src | paste -sd:)
# Pure-Python test dependencies the machine lacks (expecttest, for OpInfo) travel as wheels in
# .whl/ (the device tool's carry); they are unpacked beside the sources, never installed there.
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
export PYTHONUNBUFFERED=1
# Triton kernels compile for the GPU here; CI runs them under the interpreter instead.
export TRITON_INTERPRET=0
python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
status=0

python3 -m ptc_capture.build_ext 2>&1 | tail -1

if [ "$what" = profile ]; then
  python3 tools/profile_gpu.py "$2" --impls "${3:-eager,ptc}" --dtype "${DTYPE:-default}" 2>&1 | tee "$OUT/profile-$2.log" | grep -v "^-" | cut -c1-160
  exit "${PIPESTATUS[0]}"
fi

if [ "$what" = compile ]; then
  # Cold-compile stage tables (tools/profile_compile.py) for the WORKLOADS (default: the dynamic
  # sweep's GPT-2 under dynamic=True and False), one fresh process each.
  for spec in ${WORKLOADS:-dynamic-gpt:true dynamic-gpt:false}; do
    python3 tools/profile_compile.py "${spec%%:*}" --dynamic "${spec##*:}" --device cuda 2>&1 | tee -a "$OUT/profile-compile.log" | tail -17
  done
  exit 0
fi

if [ "$what" = dynamic ]; then
  # DYNAMIC_PARTS: tests, bench (both by default); BENCH_IMPLS: the compilers bench_dynamic runs.
  if [[ "${DYNAMIC_PARTS:-tests,bench}" != *tests* ]]; then
    python3 tools/bench_dynamic.py --device cuda --kernels --impls "${BENCH_IMPLS:-ptc,torch.compile}" \
      --json "$OUT/bench-dynamic-cuda.json" 2>&1 | tee "$OUT/bench-dynamic-cuda.log" | tail -30
    exit 0
  fi
  (cd packages/ptc-capture && timeout 240 python3 -m pytest tests -q -p no:cacheprovider -m "not slow" > "$OUT/dynamic-tests.log" 2>&1)
  echo "ptc-capture (3.12): $(tail -1 "$OUT/dynamic-tests.log")"
  (cd packages/ptc && timeout 300 python3 -m pytest tests/test_dynamic.py -q -p no:cacheprovider -m "gpu or not gpu" > /tmp/dyn.log 2>&1)
  cat /tmp/dyn.log >> "$OUT/dynamic-tests.log"
  echo "ptc dynamic tests: $(tail -1 /tmp/dyn.log)"
  grep -E "^(FAILED|ERROR)" /tmp/dyn.log | head -20
  [[ "${DYNAMIC_PARTS:-tests,bench}" == *bench* ]] && python3 tools/bench_dynamic.py --device cuda --kernels \
    --impls "${BENCH_IMPLS:-ptc,torch.compile}" --json "$OUT/bench-dynamic-cuda.json" 2>&1 | tee "$OUT/bench-dynamic-cuda.log" | tail -30
  exit 0
fi

if [ "$what" = distributed ]; then
  # On nvidia-h200-x2: NCCL's NVLink multicast stays off (the device tool's KINDS.md says why),
  # in the ranks' environments too (they inherit this one). A rank stuck in a collective dumps
  # its stack after RANK_TIMEOUT s (tests/test_distributed.py) instead of hanging the lease.
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PTC_TEST_RANK_TIMEOUT=${RANK_TIMEOUT:-150}
  python3 -c 'import torch; print("GPUs:", torch.cuda.device_count())'
  (cd packages/ptc && timeout "${TESTS_S:-300}" python3 -m pytest tests/test_distributed.py -m gpu -v -p no:cacheprovider \
    --timeout "${TEST_TIMEOUT:-170}" > "$OUT/distributed-tests.log" 2>&1)
  grep -E "PASSED|FAILED|ERROR|SKIPPED|Timeout|passed|failed|Fatal|File .*ptc" "$OUT/distributed-tests.log" | head -40
  if [ -n "${BENCH_IMPLS:-}" ]; then
    timeout "${BENCH_S:-300}" python3 tools/bench_distributed.py --device cuda --impls "$BENCH_IMPLS" --steps "${STEPS:-10}" --warmup 3 \
      --impl-timeout "${IMPL_TIMEOUT:-150}" --json "$OUT/bench-distributed.json" 2>&1 | tee "$OUT/bench-distributed.log" | grep -v Warning | tail -12
  fi
  exit 0
fi

if [ "$what" = correctness ]; then
  # Everything side by side (compiles are CPU-bound; 16 cores), each job stopping by the budget
  # so that all of them report: the OpInfo sweeps beside torch.compile in float32 and bf16
  # (SWEEP_JOBS workers each), the real-model matrix (transformers and timm models in two
  # processes, one JSON line a case), and the gpu-marked tests of inductor, aot, cudagraphs and ptc.
  budget=${2:-480}
  pids=()
  for dtype in float32 bfloat16; do
    python3 tools/opinfo_sweep.py --device cuda --dtype $dtype --jobs "${SWEEP_JOBS:-4}" --timeout 120 \
      --deadline $((budget - 45)) --json "$OUT/sweep-cuda-$dtype.json" > "$OUT/sweep-cuda-$dtype.log" 2>&1 &
    pids+=($!)
  done
  hf="gpt2 or bert or llama or t5 or nanogpt"
  for part in "$hf" "not ($hf)"; do
    tag=$([ "$part" = "$hf" ] && echo transformers || echo timm)
    (cd packages/ptc && PTC_REAL_MODELS_TABLE="$OUT/real-models.jsonl" timeout "$budget" \
      python3 -m pytest tests/test_real_models_gpu.py -q -p no:cacheprovider -m gpu -k "($part) and (${MODELS_K:-not nothing})" \
      > "/tmp/real-models-$tag.log" 2>&1) &
    pids+=($!)
  done
  (for pkg in ptc-capture ptc-inductor ptc-aot ptc-cudagraphs ptc; do
    # The capture suite runs whole here (torch on Python 3.12 exists only on this machine).
    marker="gpu and not slow"
    [ "$pkg" = ptc-capture ] && marker="not slow"
    (cd "packages/$pkg" && timeout 150 python3 -m pytest tests -q -p no:cacheprovider -m "$marker" \
      --ignore=tests/test_real_models_gpu.py > "/tmp/gpu-$pkg.log" 2>&1)
    { echo "===== $pkg [gpu]"; cat "/tmp/gpu-$pkg.log"; } >> "$OUT/tests.log"
  done) &
  pids+=($!)
  wait "${pids[@]}"
  for pkg in ptc-capture ptc-inductor ptc-aot ptc-cudagraphs ptc; do echo "$pkg: $(tail -1 "/tmp/gpu-$pkg.log")"; done
  for tag in transformers timm; do
    cat "/tmp/real-models-$tag.log" >> "$OUT/tests.log"
    echo "real models ($tag): $(tail -1 "/tmp/real-models-$tag.log")"
  done
  for dtype in float32 bfloat16; do grep -A3 "^OpInfo sweep" "$OUT/sweep-cuda-$dtype.log"; done
  exit 0
fi

if [ "$what" = triton ]; then
  shift
  python3 tools/profile_triton.py "$@" 2>&1 | tee -a "$OUT/profile-triton.log" | cut -c1-200
  exit "${PIPESTATUS[0]}"
fi

if [ "$what" = e2e ]; then
  # End to end: the README's demo, then the eager/torch.compile/ptc table (one process per cell).
  python3 -m ptc.demo 2>&1 | tail -15 || status=1
  workloads=${2:-pointwise,softmax,layernorm-residual,gpt-mini-infer,gpt-mini-train}
  tag=$(echo "$workloads" | tr ',' '-' | cut -c1-40)
  python3 tools/bench.py --workloads "$workloads" --timeout "${BENCH_TIMEOUT:-150}" --dtype "${DTYPE:-default}" \
    --json "$OUT/bench-$tag.json" --markdown "$OUT/bench-$tag.md" 2>&1 | tail -40 || status=1
  exit $status
fi

if [ "$what" != bench ]; then
  for pkg in packages/*/; do
    name=$(basename "$pkg")
    [ -d "$pkg/tests" ] || continue
    # The capture suite runs whole on 3.12 (torch exists only here); other packages run their gpu tests.
    marker="gpu"
    [ "$name" = ptc-capture ] && marker="not slow"
    (cd "$pkg" && timeout 900 python3 -m pytest tests -q -p no:cacheprovider -m "$marker" > /tmp/ptc-tests.log 2>&1)
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 5 ] && status=1
    { echo "===== $name [$marker] rc=$rc"; cat /tmp/ptc-tests.log; } >> "$OUT/tests.log"
    echo "$name [$marker]: $(tail -1 /tmp/ptc-tests.log)"
  done
  # The Triton kernel suite again with CUDA tensors: compiled kernels, not the interpreter.
  (cd packages/ptc-inductor && timeout 900 python3 -m pytest tests/test_triton_kernels.py -q -p no:cacheprovider -m "not slow" > /tmp/ptc-tests.log 2>&1)
  rc=$?
  [ $rc -ne 0 ] && status=1
  { echo "===== ptc-inductor triton kernels on cuda rc=$rc"; cat /tmp/ptc-tests.log; } >> "$OUT/tests.log"
  echo "ptc-inductor triton kernels on cuda: $(grep -E '(passed|failed|error)' /tmp/ptc-tests.log | tail -1)"
  # timm imports only here (the CPU machine's torchvision wheel is built for CUDA), so the
  # real-model cases that need it run only in this step.
  (cd packages/ptc && timeout 900 python3 -m pytest tests/test_real_models.py -q -p no:cacheprovider -m "not slow" > /tmp/ptc-tests.log 2>&1)
  rc=$?
  [ $rc -ne 0 ] && status=1
  { echo "===== ptc real models rc=$rc"; cat /tmp/ptc-tests.log; } >> "$OUT/tests.log"
  echo "ptc real models: $(tail -1 /tmp/ptc-tests.log)"
fi

if [ "$what" != tests ]; then
  for bench in tools/bench_triton.py tools/bench_cudagraphs.py; do
    [ -f "$bench" ] || continue
    timeout 900 python3 "$bench" > "$OUT/$(basename "$bench" .py).log" 2>&1 || status=1
    tail -30 "$OUT/$(basename "$bench" .py).log"
  done
fi
exit $status
