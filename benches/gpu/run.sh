#!/usr/bin/env bash
# Every GPU check of the project in one script, run first whenever a GPU is lent. It runs
# binaries built on a CPU machine by benches/gpu/build.sh (carried in .gpubin/ and
# .gpubin-more/, with transformers/peft wheels in .whl/); the GPU machine has no Rust and no network. Prints
# one report; with $OUT set (the device tool), writes it there as it goes.
#
#   benches/gpu/run.sh [BUDGET_S]   # on the GPU machine, from the repository root; default 540
#   GPU_SECTIONS="2 4" GPU_SIZES=2b benches/gpu/run.sh 290   # a re-run of some sections
#   GPU_SECTIONS=4 GPU_SIZES=2b GPU_SPEED=0 benches/gpu/run.sh 330   # the decode tables alone
#
# Sections, most important first; each gets at most what is left of BUDGET_S, so a slow
# section cannot eat the report:
#  1. the card and driver;
#  2. Qwen-VL parity on CUDA against transformers (tests/qwen_vl/): f32 (bound 1e-4) and
#     bf16 (bound 3e-2);
#  3. the small policy: forward+backward+AdamW on CUDA against the same binary on the
#     machine's CPU (benches/policy_speed.rs; the per-step losses must agree), and the same
#     model in PyTorch (scripts/small_policy_torch.py) where it exists;
#  4. Qwen-VL speed on CUDA, guirl against PyTorch + peft on the same GPU in one run
#     (scripts/bench_qwen_speed.py), bf16: a Qwen3-VL-2B-shaped random-weight model, then
#     the tiny fixture; then one decoder layer of the 2B shape, part by part;
#     then the rollout decoding table: the policy's own continuous-batching decoder for 1 to
#     128 rollouts of different screenshots, tokens/s and peak memory against the copy
#     bandwidth's roofline measured in the same run (benches/decode_table.rs), with the
#     GPU defaults (window slots sized per prompt, each count's rollouts in one chunk of
#     that many rows, as a collector of that many envs decodes them, the tokens read every
#     step, the adapters merged), beside PyTorch's `generate` over the same prompts
#     (scripts/decode_table_torch.py, GPU_TORCH=0 leaves it out); then the fused decoding
#     kernels (decode_kernels fused: their log-probs against the trainer's, then their
#     table, GPU_FUSED_ROLLOUTS); then each chunk's step captured as a CUDA graph
#     (decode_graph, eager and fused kernels, GPU_GRAPH_ROLLOUTS); then the adapters separate, the decoder's log-probs against the trainer's (merged and separate),
#     chunks of 32 slots (the default before 2026-12-05), per-answer attention in chunks of
#     8 (the default before 2026-12-04), what batch invariance costs (one chunk of 64 rows
#     with per-answer attention, padded and then its live answers alone, the prompts
#     alone and then together, GPU_INVARIANCE_ROLLOUTS), and the tokens read every 8 steps;
#  5. NCCL's data-parallel gradient sum (tests/nccl.rs, the `nccl` feature), one rank per
#     GPU, against the sum through the host;
#  6. a whole RL iteration: `guirl train` of the 2B-shaped random model (section 4 writes
#     it), bf16, LoRA, GRPO 8 groups x 8 rollouts x up to 5 steps on MiniWoB++ click-test
#     with real browsers (benches/gpu/browser.sh's headless shell, from .gpuloop/), at
#     max_staleness 0 then 1 (GPU_LOOP_INVARIANT="true false": each also with
#     batch_invariant = false, the prompts run together; GPU_LOOP_KERNELS=fused and
#     GPU_LOOP_GRAPH=true decode with the fused kernels and captured steps;
#     GPU_LOOP_ORDER="shuffled group_steps" also cuts the update's minibatches by group and step;
#     GPU_LOOP_ONCE="true false" also scores every state's prompt whole): the run's phase table and the
#     GPU's busy share (nvidia-smi sampled every 200 ms). Not a default section: its files come in calls of their own
#     (see browser.sh and docs/gpu.md), after section 4 on the same warm machine, or with
#     GPU_SECTIONS="4 6" in one call.
#  7. a profile of a few decoding steps (Nsight Compute, decode_table --profile): launches
#     and device time per step, by kernel (scripts/ncu_summary.py); GPU_PROFILE_ARGS adds
#     decode_table flags (GPU_PROFILE_ARGS="--kernels fused"). Not a default section:
#     after section 4 on the same warm machine (it reads section 4's model).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUDGET=${1:-540}
REPORT=${OUT:-/tmp}/gpu-report.md
BIN=/tmp/guirl-gpu; mkdir -p $BIN
exec > >(tee "$REPORT") 2>&1
export PYTHONUNBUFFERED=1
start=$(date +%s)
section() { echo; echo "## $1 (t+$(( $(date +%s) - start ))s)"; }
# whether section $1 is wanted (GPU_SECTIONS, default all)
want() { [[ " ${GPU_SECTIONS:-2 3 4 5} " == *" $1 "* ]]; }
# at most $1 seconds, and never past the budget
cap() { local left=$(( BUDGET - ($(date +%s) - start) )); (( left < $1 )) && echo $(( left > 5 ? left : 5 )) || echo "$1"; }

section "1. device"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv || { echo "no GPU"; exit 1; }
# sections 2 and 4's binaries come in .gpubin, the others in .gpubin-more (benches/gpu/build.sh)
for f in .gpubin/*.xz .gpubin-more/*.xz; do
  [ -f "$f" ] || continue
  b=$(basename "$f" .xz)
  python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$f" > $BIN/$b && chmod +x $BIN/$b
done
NV=$(python3 -c 'import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],"cu13","lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH=${NV}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ldd $BIN/qwen_speed | grep 'not found'; then echo "missing libraries (see docs/cuda.md)"; exit 1; fi
# The test binary finds its fixtures through the path it was built at (CARGO_MANIFEST_DIR).
BUILT_AT=$(cat .gpubin/built_at 2>/dev/null)
if [ -n "$BUILT_AT" ] && [ ! -e "$BUILT_AT/fixtures" ]; then
  mkdir -p "$(dirname "$BUILT_AT")" && ln -sfn "$PWD" "$BUILT_AT" && echo "fixtures: $BUILT_AT -> $PWD"
fi
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
echo "binaries built from commit $(cat .gpubin/commit 2>/dev/null || echo unknown) (the speed bench's 'guirl at' line reads this copy's git metadata instead)"
python3 -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)'

want 2 && section "2. Qwen-VL parity on CUDA"
want 2 && for dt in f32 bf16; do
  echo "### $dt"
  # GPU_PARITY_TESTS: test-name filters, substrings (GPU_PARITY_TESTS=fused: the fused kernels' tests,
  # and one config test whose name holds "refused")
  GUIRL_TEST_DEVICE=cuda GUIRL_TEST_DTYPE=$dt timeout "$(cap 90)" $BIN/qwen_vl ${GPU_PARITY_TESTS:-} --test-threads 1 --nocapture 2>&1 \
    | grep -E "relative error|max diff|^test |test result|panicked|Error" || echo "parity tests failed to run"
done

if want 3; then
section "3. small policy: CUDA against CPU (same binary, batch 32), and PyTorch"
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184
echo "### guirl, CUDA"
timeout "$(cap 60)" $BIN/policy_speed small 32 cuda || echo "policy_speed on CUDA failed (rc $?)"
echo "### guirl, CPU ($(nproc) cores)"
timeout "$(cap 100)" $BIN/policy_speed small 32 cpu || echo "policy_speed on CPU failed (rc $?)"
if [ -f scripts/small_policy_torch.py ]; then
  W=/tmp/small-policy; rm -rf $W
  if timeout "$(cap 30)" $BIN/policy_speed small 32 cpu export=$W >/dev/null; then
    echo "### PyTorch twin: check, then CUDA and CPU"
    timeout "$(cap 40)" python3 scripts/small_policy_torch.py check $W || echo "twin check failed (rc $?)"
    timeout "$(cap 40)" python3 scripts/small_policy_torch.py time $W --device cuda || echo "twin on CUDA failed (rc $?)"
    echo "### PyTorch twin with fused attention (SDPA; not guirl's math, for reference)"
    timeout "$(cap 30)" python3 scripts/small_policy_torch.py time $W --device cuda --sdpa || echo "twin --sdpa failed (rc $?)"
    timeout "$(cap 60)" python3 scripts/small_policy_torch.py time $W --device cpu --threads "$(nproc)" \
      || echo "twin on CPU failed (rc $?)"
  else
    echo "export for the PyTorch twin failed"
  fi
fi
unset MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_
fi

want 4 && section "4. Qwen-VL speed: guirl against PyTorch + peft, same GPU, bf16"
want 4 && for size in ${GPU_SIZES:-2b tiny}; do
  echo "### $size"
  if [ "${GPU_SPEED:-1}" = 0 ]; then
    # the decode tables alone: only write the random checkpoint the speed bench would
    [ "$size" = tiny ] && continue
    timeout "$(cap 120)" python3 -c 'import sys; sys.path.insert(0, "scripts"); import qwen_speed_setup as s
s.write_big_checkpoint(sys.argv[1], sys.argv[2], "bf16", "cuda")' /tmp/qwen-speed/qwen3_vl_${size}_bf16 $size \
      || echo "writing the $size checkpoint failed (rc $?)"
  else
  timeout "$(cap 300)" python3 scripts/bench_qwen_speed.py --device cuda --dtype bf16 --sizes $size \
    --work /tmp/qwen-speed --guirl-bench $BIN/qwen_speed || echo "speed bench $size failed (rc $?)"
  [ -f /tmp/qwen-speed/guirl.log ] && { echo "guirl side's log (tail):"; tail -5 /tmp/qwen-speed/guirl.log; }
  [ -n "${OUT:-}" ] && mv /tmp/qwen-speed/results.json "$OUT/qwen-speed-$size.json" 2>/dev/null
  fi
  # where one decoder layer's time goes: its parts alone against the whole (benches/qwen_speed/parts.rs, mode `profile`)
  if [ "${GPU_SPEED:-1}" != 0 ] && [ "$size" != tiny ] && [ -f /tmp/qwen-speed/$size/inputs.json ]; then
    echo "### $size: one decoder layer, part by part"
    timeout "$(cap 60)" $BIN/qwen_speed profile --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
      --inputs /tmp/qwen-speed/$size/inputs.json --out "${OUT:-/tmp}/qwen-profile-$size.json" || echo "profile $size failed (rc $?)"
    # the same with cudarc's and the driver's defaults (per-buffer events, pool trimmed at
    # every sync; src/policy/device.rs), for the difference in one run
    echo "### $size: the same, GUIRL_CUDA_DEFAULTS=1"
    GUIRL_CUDA_DEFAULTS=1 timeout "$(cap 60)" $BIN/qwen_speed profile --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
      --inputs /tmp/qwen-speed/$size/inputs.json --out "${OUT:-/tmp}/qwen-profile-$size-defaults.json" || echo "profile $size failed (rc $?)"
    if [ -n "${GPU_DEFAULTS_TIME:-}" ]; then
      echo "### $size: guirl's update and generation with GUIRL_CUDA_DEFAULTS=1"
      GUIRL_CUDA_DEFAULTS=1 RAYON_NUM_THREADS=$(nproc) timeout "$(cap 120)" $BIN/qwen_speed time --device cuda --dtype bf16 \
        --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 --inputs /tmp/qwen-speed/$size/inputs.json \
        --out "${OUT:-/tmp}/qwen-time-$size-defaults.json" 2>&1 | grep -E "update rep|generate rep|^\{" | cut -c1-400 \
        || echo "time $size (defaults) failed"
    fi
  fi
  # rollout decoding: 1 to 128 concurrent rollouts through the continuous-batching decoder
  if [ -d /tmp/qwen-speed/qwen3_vl_${size}_bf16 ] && [ -f $BIN/decode_table ]; then
    echo "### $size: rollout decoding table"
    timeout "$(cap 120)" $BIN/decode_table --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
      --rollouts ${GPU_ROLLOUTS:-1,8,16,32,64,128} --tokens 32 --out "${OUT:-/tmp}/decode-table-$size.json" \
      --export /tmp/decode-prompts-$size || echo "decode table $size failed (rc $?)"
    # GPU_TORCH=0 leaves PyTorch's side out (a rerun of guirl's side alone)
    if [ "${GPU_TORCH:-1}" != 0 ]; then
    echo "### $size: the same prompts through PyTorch's generate (transformers sdpa + peft), side by side"
    timeout "$(cap 150)" python3 scripts/decode_table_torch.py --device cuda --dtype bf16 \
      --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 --prompts /tmp/decode-prompts-$size \
      --rollouts ${GPU_ROLLOUTS:-1,8,16,32,64,128} --guirl "${OUT:-/tmp}/decode-table-$size.json" \
      --out "${OUT:-/tmp}/decode-table-torch-$size.json" || echo "PyTorch decode table $size failed (rc $?)"
    fi
    # the fused decoding kernels (decode_kernels fused): first their log-probs against the
    # trainer's, a check of the kernels at the model's size (eager's are in the loop below),
    # then their table
    echo "### $size: fused decoding kernels: the decoder's log-probs against the trainer's, then the decoding table"
    timeout "$(cap 60)" $BIN/decode_table --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
      --tokens 32 --kernels fused --mismatch 8 2>&1 | tail -1 | sed "s/^/fused: /" || echo "mismatch (fused) failed"
    timeout "$(cap 60)" $BIN/decode_table --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
      --rollouts ${GPU_FUSED_ROLLOUTS:-1,8,16,32,64} --tokens 32 --kernels fused \
      --out "${OUT:-/tmp}/decode-table-fused-$size.json" || echo "decode table (fused) $size failed (rc $?)"
    # each chunk's decoding step captured once as a CUDA graph and replayed (decode_graph),
    # with eager and with fused kernels: one launch a step instead of every kernel's
    echo "### $size: decoding steps captured as CUDA graphs (decode_graph), eager then fused kernels"
    for k in eager fused; do
      timeout "$(cap 60)" $BIN/decode_table --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
        --rollouts ${GPU_GRAPH_ROLLOUTS:-1,8,32,64} --tokens 32 --kernels $k --graph \
        --out "${OUT:-/tmp}/decode-table-graph-$k-$size.json" || echo "decode table (graph, $k) $size failed (rc $?)"
    done
    echo "### $size: rollout decoding table, the adapters separate (decode_lora separate; the default merges them)"
    timeout "$(cap 60)" $BIN/decode_table --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
      --rollouts ${GPU_SEPARATE_ROLLOUTS:-1,32} --tokens 32 --lora separate \
      --out "${OUT:-/tmp}/decode-table-separate-$size.json" || echo "decode table (separate) $size failed (rc $?)"
    echo "### $size: the decoder's log-probs against the trainer's rescoring, merged and separate"
    for lora in merged separate; do
      timeout "$(cap 60)" $BIN/decode_table --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
        --tokens 32 --lora $lora --mismatch 8 2>&1 | tail -1 | sed "s/^/$lora: /" || echo "mismatch ($lora) failed"
    done
    echo "### $size: rollout decoding table, candle's upload cache on (strided kernels' dims and strides uploaded once per shape)"
    timeout "$(cap 60)" $BIN/decode_table --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
      --rollouts ${GPU_CACHE_ROLLOUTS:-1,32} --tokens 32 --cache-uploads \
      --out "${OUT:-/tmp}/decode-table-cached-$size.json" || echo "decode table (upload cache) $size failed (rc $?)"
    echo "### $size: rollout decoding table, chunks of 32 window slots (the default before 2026-12-05)"
    timeout "$(cap 60)" $BIN/decode_table --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
      --rollouts ${GPU_WIDE_ROLLOUTS:-1,64,128} --tokens 32 --rows 32 \
      --out "${OUT:-/tmp}/decode-table-rows32-$size.json" || echo "decode table (rows 32) $size failed (rc $?)"
    echo "### $size: rollout decoding table, per-answer attention in chunks of 8 (decode_window off)"
    timeout "$(cap 90)" $BIN/decode_table --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
      --rollouts ${GPU_OFF_ROLLOUTS:-1,16,64} --tokens 32 --window off --rows 8 \
      --out "${OUT:-/tmp}/decode-table-off-$size.json" || echo "decode table (window off) $size failed (rc $?)"
    echo "### $size: what batch invariance costs: per-answer attention in one chunk of 64 rows, padded and each prompt alone (the default), then each chunk's live answers alone and the prompts admitted together run in one pass (batch_invariant false): the prefill column shows the second"
    for inv in true false; do
      timeout "$(cap 60)" $BIN/decode_table --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
        --rollouts ${GPU_INVARIANCE_ROLLOUTS:-1,8,64} --tokens 32 --window off --rows 64 --invariant $inv \
        --out "${OUT:-/tmp}/decode-table-invariant-$inv-$size.json" || echo "decode table (invariant $inv) $size failed (rc $?)"
    done
    echo "### $size: rollout decoding table, the host reading the tokens every 8 steps (decode_sync 8; the default is 1)"
    timeout "$(cap 60)" $BIN/decode_table --device cuda --dtype bf16 --model /tmp/qwen-speed/qwen3_vl_${size}_bf16 \
      --rollouts ${GPU_SYNC_ROLLOUTS:-1,8,64} --tokens 32 --sync 8 \
      --out "${OUT:-/tmp}/decode-table-sync8-$size.json" || echo "decode table (sync 8) $size failed (rc $?)"
  fi
done
if want 5; then
section "5. NCCL: gradients summed on the GPUs"
# the GPU image's NCCL (a dependency of its torch); the binary links libnccl.so.2
NCCL_LIB=$(python3 -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))' 2>/dev/null)
if [ -z "$NCCL_LIB" ]; then echo "no NCCL on this machine (python3 -c 'import nvidia.nccl' fails)";
else
  echo "NCCL: $(ls $NCCL_LIB/libnccl.so* | head -1), $(nvidia-smi -L | wc -l) GPU(s)"
  LD_LIBRARY_PATH=$NCCL_LIB:$LD_LIBRARY_PATH NCCL_DEBUG=WARN timeout "$(cap 60)" $BIN/nccl --nocapture 2>&1 | tail -15 \
    || echo "NCCL test failed to run"
fi
fi
if want 6; then
section "6. a whole RL iteration: guirl train, 2B shape, bf16, real browsers"
BR=/tmp/guirl-browser
if [ ! -x $BR/chromium-headless-shell ] && [ -f .gpuloop/shell.xz ]; then
  mkdir -p $BR
  python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' .gpuloop/shell.xz \
    > $BR/chromium-headless-shell && chmod 755 $BR/chromium-headless-shell && echo "unpacked the headless shell"
fi
if [ ! -x $BR/chromedriver ] && [ -f .gpuloop/rest.tar.xz ]; then
  python3 -c 'import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' \
    .gpuloop/rest.tar.xz $BR && echo "unpacked chromedriver, libraries and pages"
fi
chmod -R a+rX $BR 2>/dev/null  # the browser may run as an unprivileged user
if [ -f .gpuloop/guirl.xz ] && [ ! -x $BIN/guirl ]; then
  python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' .gpuloop/guirl.xz > $BIN/guirl \
    && chmod +x $BIN/guirl
fi
MODEL=/tmp/qwen-speed/qwen3_vl_2b_bf16
if [ ! -x $BR/chromium-headless-shell ] || [ ! -x $BR/chromedriver ]; then
  echo "no browser yet: carry .gpuloop/shell.xz, then .gpuloop/rest.tar.xz (benches/gpu/browser.sh)"
elif [ ! -x $BIN/guirl ]; then echo "no CLI: carry .gpuloop/guirl.xz (benches/gpu/build.sh)"
elif [ ! -f $MODEL/config.json ]; then echo "no 2B-shaped model in $MODEL: run section 4 first (GPU_SECTIONS=\"4 6\")"
else
  export GUIRL_CHROMIUM=$BR/chromium-headless-shell GUIRL_CHROMEDRIVER=$BR/chromedriver \
    GUIRL_MINIWOB_DIR=$BR/miniwob-html FONTCONFIG_FILE=$BR/fonts/fonts.conf
  # GPU_LOOP_INVARIANT="true false" also runs each bound with batch_invariant = false
  # (prompts run together, chunks unpadded): the prefill phase beside the default's
  # GPU_LOOP_ORDER="shuffled group_steps" also runs each with the update's minibatches cut by
  # group and env step (a group's first steps then score their prompt once)
  # GPU_LOOP_ONCE="true false" also runs each with score_same_states_once = false (every
  # state's prompt whole in the update's padded batch: the passes a shared prompt saves or adds)
  for once in ${GPU_LOOP_ONCE:-true}; do
  for order in ${GPU_LOOP_ORDER:-shuffled}; do
  for inv in ${GPU_LOOP_INVARIANT:-true}; do
  for bound in ${GPU_LOOP_BOUNDS:-0 1}; do
    tag=$bound; [ "$inv" = true ] || tag=$bound-batched
    # GPU_LOOP_KERNELS=fused and GPU_LOOP_GRAPH=true decode with the fused kernels and the
    # steps captured as CUDA graphs (the graph needs batch_invariant = true)
    kernels=${GPU_LOOP_KERNELS:-eager}; graph=${GPU_LOOP_GRAPH:-false}
    [ "$kernels" = eager ] || tag=$tag-$kernels; [ "$graph" = false ] || tag=$tag-graph
    [ "$order" = shuffled ] || tag=$tag-$order; [ "$once" = true ] || tag=$tag-whole
    echo "### max_staleness = $bound, batch_invariant = $inv, decode_kernels = $kernels, decode_graph = $graph," \
      "minibatch_order = $order, score_same_states_once = $once"
    sed -e "s#@MODEL@#$MODEL#; s#@PROMPT@#$PWD/configs/prompts/short.md#; s#@BOUND@#$bound#" \
      -e "s#@ITERATIONS@#${GPU_LOOP_ITERATIONS:-3}#; s#@ENVS@#${GPU_LOOP_ENVS:-16}#; s#@INVARIANT@#$inv#" \
      -e "s#@KERNELS@#$kernels#; s#@GRAPH@#$graph#; s#@ORDER@#$order#; s#@ONCE@#$once#" \
      benches/gpu/loop.toml > /tmp/loop-$tag.toml
    rm -rf /tmp/loop-run-$tag
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 > /tmp/util-$tag.txt &
    SAMPLER=$!
    LD_LIBRARY_PATH=$BR/lib:${LD_LIBRARY_PATH:-} timeout "$(cap 240)" $BIN/guirl train /tmp/loop-$tag.toml \
      --out /tmp/loop-run-$tag 2>&1 | grep -v "blocked a page's request" | tail -25
    kill $SAMPLER 2>/dev/null
    # the busy share over the run's second half too (the first loads the model, starts browsers)
    python3 -c 'import sys
u = [float(x) for x in open(sys.argv[1]) if x.strip().isdigit()]
h = u[len(u) // 2:]
print(f"GPU busy (nvidia-smi utilization): {sum(u) / max(len(u), 1):.0f} % over the run, "
      f"{sum(h) / max(len(h), 1):.0f} % over its second half ({len(u)} samples)")' /tmp/util-$tag.txt
    [ -n "${OUT:-}" ] && cp /tmp/loop-run-$tag/phases.md "$OUT/loop-phases-$tag.md" 2>/dev/null
  done
  done
  done
  done
fi
fi
if want 7; then
section "7. where a decoding step's time goes: Nsight Compute over a few steps"
# kernel by kernel over a whole run is far too slow (run 9: not through the warm-up in 80 s);
# the bench opens the profiler's range for STEPS decoding steps alone (decode_table --profile)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
MODEL=/tmp/qwen-speed/qwen3_vl_2b_bf16
if [ -z "$NCU" ]; then echo "no ncu on this machine"
elif [ ! -f $MODEL/config.json ]; then echo "no 2B-shaped model in $MODEL: run section 4 first"
else
  for n in ${GPU_PROFILE_ROLLOUTS:-1 8}; do
    echo "### $n rollout(s), 3 steps"
    timeout "$(cap 90)" $NCU --profile-from-start off --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum --csv --page raw --log-file /tmp/ncu-decode-$n.csv \
      $BIN/decode_table --device cuda --dtype bf16 --model $MODEL --rollouts $n --tokens 32 --profile 3 \
      ${GPU_PROFILE_ARGS:-} \
      || echo "ncu over $n rollout(s) failed (rc $?)"
    python3 scripts/ncu_summary.py /tmp/ncu-decode-$n.csv 3
    [ -n "${OUT:-}" ] && xz -c /tmp/ncu-decode-$n.csv > "$OUT/ncu-decode-$n.csv.xz"
  done
fi
fi
section "done"
