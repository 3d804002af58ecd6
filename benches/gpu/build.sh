#!/usr/bin/env bash
# Build everything benches/gpu/run.sh needs, here on a CPU machine, and pack it into
# .gpubin/ (gitignored) for the GPU machine, which has no Rust and no network.
# Follows shared/CUDA-BUILD.md: CUDA 13.0 from PyPI, a libcuda stub to link, sm_90.
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
export CUDA_HOME=$("$VENV/bin/python" -c 'import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],"cu13"))')
export PATH="$CUDA_HOME/bin:$PATH"
nvcc --version | grep -q "release 13.0" || { echo "nvcc is not CUDA 13.0" >&2; exit 1; }
( cd "$CUDA_HOME/lib" && for l in cudart:13 cublas:13 cublasLt:13 curand:10 nvrtc:13; do
    ln -sf "lib${l%:*}.so.${l#*:}" "lib${l%:*}.so"; done )
if [ ! -f "$CUDA_HOME/lib/stubs/libcuda.so" ]; then
  cargo fetch
  CUDARC=$(cargo metadata --format-version 1 --features cuda | python3 -c \
    'import json,sys,os;print(os.path.dirname([p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"]=="cudarc"][0]))')
  mkdir -p "$CUDA_HOME/lib/stubs"
  grep -oE 'pub unsafe fn cu[A-Za-z0-9_]+\(' "$CUDARC/src/driver/sys/mod.rs" | sort -u \
    | sed -E 's/pub unsafe fn (cu[A-Za-z0-9_]+)\(/int \1(void){return 999;}/' > "$CUDA_HOME/lib/stubs/libcuda_stub.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$CUDA_HOME/lib/stubs/libcuda.so" "$CUDA_HOME/lib/stubs/libcuda_stub.c"
fi
export CUDA_COMPUTE_CAP=90 CUDAFORGE_THREADS=2
cargo build --release --features cuda --target-dir target-cuda --bin guirl --bench policy_speed --bench qwen_speed
# test binaries: the Qwen-VL parity tests run on the GPU too
cargo test --release --features cuda --target-dir target-cuda --test qwen_vl --no-run 2>&1 | tee /tmp/gpu-test-build.log
mkdir -p .gpubin
gzip -c target-cuda/release/guirl > .gpubin/guirl.gz
for b in qwen_vl policy_speed qwen_speed; do
  f=$(ls -t target-cuda/release/deps/$b-* | grep -v '\.d$' | head -1)
  gzip -c "$f" > ".gpubin/$b.gz"
done
du -sh .gpubin
echo "carry .gpubin (and fixtures/, scripts/) with the device tool, then run benches/gpu/run.sh there"
