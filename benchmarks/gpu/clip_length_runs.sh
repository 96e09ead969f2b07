#!/usr/bin/env bash
# The figures at Cosmos 3's clip length on one Hopper GPU, in one go, sharing the machine's starts:
#   1. SageAttention's and FlashAttention 3's Hopper kernels, built by the engine's builders on the CPU while the
#      plain calls run on the GPU;
#   2. the levers at 480p, 189 frames: the plain call, the compiled plain call, the exact bf16 engine (with its
#      request in parts) on cuDNN's attention and on FlashAttention 3's, fp8 products with 8-bit attention exact and
#      with the step cache (interval 3);
#   3. the attention kernels alone at 480p/189 and 720p/93;
#   4. the levers at 720p, 93 frames (the plain call, the exact engine on both kernels, 8-bit attention, with and
#      without the cache).
# Each step writes its JSON as it goes, so what finished is kept if the machine is taken back.
#
#   OMNI_STUDIO_SAGE_SOURCE=SRC OMNI_STUDIO_FLASH3_SOURCE=FA_SRC benchmarks/gpu/clip_length_runs.sh OUT_DIR
set -u
out=${1:?usage: clip_length_runs.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
stamp() { echo "$(date -u +%H:%M:%S) $*" >>"$out/steps.log"; }

stamp "kernel builds"
(python3 -m studio.engine.gpu.sage_build && python3 -m studio.engine.gpu.flash3_build) >"$out/kernel_build.log" 2>&1 &
build=$!

stamp "levers 480p 189"
python3 benchmarks/gpu/levers_gpu.py --out "$out/levers_480p" --tiers 480p --frames 189 \
    --quantizations bf16,flash3,fp8-sage --bf16-policies exact --policies-of flash3=exact --policies exact,taylor/3 \
    >"$out/levers_480p.log" 2>&1
wait "$build"
stamp "kernel builds exit $?"

stamp "kernels"
python3 benchmarks/gpu/sage_attention_gpu.py --out "$out/kernels" --shapes 480p:189,720p:93 >"$out/kernels.log" 2>&1

stamp "levers 720p 93"
python3 benchmarks/gpu/levers_gpu.py --out "$out/levers_720p" --tiers 720p --frames 93 --no-compiled-plain \
    --quantizations bf16,flash3,fp8-sage --bf16-policies exact --policies-of flash3=exact --policies exact,taylor/3 \
    >"$out/levers_720p.log" 2>&1
stamp "done"
