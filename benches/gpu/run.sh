#!/usr/bin/env bash
# Every GPU check of the project in one script, <= 8 minutes, run first whenever a GPU is
# lent. It runs binaries built on a CPU machine by benches/gpu/build.sh (carried in
# .gpubin/); the GPU machine has no Rust and no network. Prints one report; with $OUT set
# (the device tool), copies it there.
#
#   benches/gpu/run.sh            # on the GPU machine, from the repository root
#
# Sections, as far as they exist:
#  1. the card and driver;
#  2. the small policy: forward+backward+AdamW speed on CUDA against the same binary on
#     the machine's CPU (benches/policy_speed.rs);
#  3. Qwen-VL parity on CUDA against transformers (tests/qwen_vl.rs): f32 (bound 1e-4) and
#     bf16 (bound 5e-2);
#  4. Qwen-VL speed on CUDA, guirl against PyTorch + peft on the same GPU in one run
#     (scripts/bench_qwen_speed.py), bf16, a Qwen3-VL-2B-shaped random-weight model.
# Not yet here: the small policy written in PyTorch (section 2's PyTorch column).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPORT=${OUT:-/tmp}/gpu-report.md
BIN=/tmp/guirl-gpu; mkdir -p $BIN
exec > >(tee "$REPORT") 2>&1
start=$(date +%s)
section() { echo; echo "## $1 (t+$(( $(date +%s) - start ))s)"; }

section "1. device"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv || { echo "no GPU"; exit 1; }
for b in guirl qwen_vl policy_speed qwen_speed; do
  [ -f .gpubin/$b.gz ] && gunzip -c .gpubin/$b.gz > $BIN/$b && chmod +x $BIN/$b
done
NV=$(python3 -c 'import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],"cu13","lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH=${NV}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ldd $BIN/guirl | grep 'not found'; then echo "missing libraries (see shared/CUDA-BUILD.md)"; exit 1; fi

section "2. small policy: CUDA against CPU (same binary, batch 32)"
if [ -x $BIN/policy_speed ]; then
  timeout 120 $BIN/policy_speed small 32 || echo "policy_speed failed (rc $?)"
  CUDA_VISIBLE_DEVICES= timeout 120 $BIN/policy_speed small 32 || echo "policy_speed on CPU failed (rc $?)"
fi

section "3. Qwen-VL parity on CUDA"
for dt in f32 bf16; do
  echo "### $dt"
  GUIRL_TEST_DEVICE=cuda GUIRL_TEST_DTYPE=$dt timeout 120 $BIN/qwen_vl --test-threads 1 --nocapture 2>&1 \
    | grep -E "relative error|^test |test result" || echo "parity tests failed to run"
done

section "4. Qwen-VL speed: guirl against PyTorch + peft, same GPU, bf16"
if python3 -c 'import torch, transformers, peft' 2>/dev/null && [ -f scripts/bench_qwen_speed.py ]; then
  timeout 300 python3 scripts/bench_qwen_speed.py --device cuda --dtype bf16 --sizes tiny,2b \
    --guirl-bench $BIN/qwen_speed || echo "speed bench failed (rc $?)"
else
  echo "python3 with torch/transformers/peft, or scripts/bench_qwen_speed.py, missing: skipped"
fi
section "done"
