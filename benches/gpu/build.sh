#!/usr/bin/env bash
# Build everything benches/gpu/run.sh needs, here on a CPU machine, and pack it into
# .gpubin/ (gitignored) for the GPU machine, which has no Rust and no network.
# CUDA 13.0 from PyPI, a libcuda stub to link, sm_90; docs/cuda.md says why.
#
#   benches/gpu/build.sh        # ~35 min the first time, minutes afterwards
#
# Then, on the GPU machine: benches/gpu/run.sh (the device tool carries .gpubin/).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${CUDA_VENV:-$PWD/.cuda-venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q \
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88 \
    nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35
fi
# NCCL, for the `nccl` feature's test (links libnccl.so.2; the GPU image has its own, torch's)
"$VENV/bin/python" -c 'import nvidia.nccl' 2>/dev/null || "$VENV/bin/pip" install -q --no-deps nvidia-nccl-cu13==2.32.3
export CUDA_HOME=$("$VENV/bin/python" -c 'import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],"cu13"))')
export PATH="$CUDA_HOME/bin:$PATH"
nvcc --version | grep -q "release 13.0" || { echo "nvcc is not CUDA 13.0" >&2; exit 1; }
( cd "$CUDA_HOME/lib" && for l in cudart:13 cublas:13 cublasLt:13 curand:10 nvrtc:13; do
    ln -sf "lib${l%:*}.so.${l#*:}" "lib${l%:*}.so"; done
  ln -sf ../../nccl/lib/libnccl.so.2 libnccl.so )
if [ ! -f "$CUDA_HOME/lib/stubs/libcuda.so" ]; then
  cargo fetch
  CUDARC=$(cargo metadata --format-version 1 --features cuda | python3 -c \
    'import json,sys,os;print(os.path.dirname([p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"]=="cudarc"][0]))')
  mkdir -p "$CUDA_HOME/lib/stubs"
  grep -oE 'pub unsafe fn cu[A-Za-z0-9_]+\(' "$CUDARC/src/driver/sys/mod.rs" | sort -u \
    | sed -E 's/pub unsafe fn (cu[A-Za-z0-9_]+)\(/int \1(void){return 999;}/' > "$CUDA_HOME/lib/stubs/libcuda_stub.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$CUDA_HOME/lib/stubs/libcuda.so" "$CUDA_HOME/lib/stubs/libcuda_stub.c"
fi
# the link finds the stub through this too: a CUDA build cached from before the stub existed
# (its build scripts' search paths saved without it) fails with "unable to find -lcuda"
export LIBRARY_PATH="$CUDA_HOME/lib/stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"
export CUDA_COMPUTE_CAP=90 CUDAFORGE_THREADS=2
cargo build --release --features cuda --target-dir target-cuda --bin guirl --bench policy_speed --bench qwen_speed --bench decode_table
# test binaries: the Qwen-VL parity tests run on the GPU too
cargo test --release --features cuda --target-dir target-cuda --test qwen_vl --no-run 2>&1 | tee /tmp/gpu-test-build.log
# guirl's own kernels, before any GPU time is spent on them: NVRTC compiles each and ptxas
# assembles it for the card, neither needing a GPU; a kernel that does not compile, or whose
# blocks ask for more registers or shared memory than the card has, or spill, fails here
# (the test binary runs here on the stub driver, which these tests never call)
ln -sf libcuda.so "$CUDA_HOME/lib/stubs/libcuda.so.1"
LD_LIBRARY_PATH="$CUDA_HOME/lib:$CUDA_HOME/lib/stubs" \
  cargo test --release --features cuda --target-dir target-cuda --lib -- compile nn::kernel::fit
# and NCCL's gradient sum (tests/nccl.rs), the one binary built with the `nccl` feature
cargo test --release --features nccl --target-dir target-cuda --test nccl --no-run 2>&1 | tee -a /tmp/gpu-test-build.log
# The device tool carries at most 64 MiB a call, the tracked files (17 MB) included: xz
# the binaries run.sh uses, sections 2 and 4's in .gpubin (carried with .whl: 62 MB with
# the tracked files), sections 3 and 5's in .gpubin-more (carried in a call of their own);
# the CLI goes to .gpuloop/.
rm -rf .gpubin .gpubin-more && mkdir -p .gpubin .gpubin-more
for b in qwen_speed decode_table qwen_vl policy_speed nccl; do
  f=$(ls -t target-cuda/release/deps/$b-* | grep -v '\.d$' | head -1)
  case $b in qwen_speed|decode_table|qwen_vl) d=.gpubin ;; *) d=.gpubin-more ;; esac
  xz -T2 -6 -c "$f" > "$d/$b.xz"
done
# The CLI, for section 6 (a whole RL iteration), beside the browser of benches/gpu/browser.sh.
mkdir -p .gpuloop && xz -T2 -6 -c target-cuda/release/guirl > .gpuloop/guirl.xz
# transformers and peft as tested here (the GPU image's transformers is older), as wheels:
# pure Python; their other needs are in the GPU image.
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 -d .whl transformers==5.24.0 peft==0.21.2
git describe --always --dirty > .gpubin/commit  # the bench's own "guirl at" line reads the copy's git
pwd > .gpubin/built_at  # the test binary reads its fixtures from here (CARGO_MANIFEST_DIR)
du -sh .gpubin .gpubin-more .whl .gpuloop
echo "then with the device tool: carry .gpubin and .whl (and .gpubin-more for sections 3 and 5), command benches/gpu/run.sh (docs/gpu.md)"
