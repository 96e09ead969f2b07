#!/usr/bin/env bash
# The figures at Cosmos 3's clip length on one Hopper GPU, in one go, sharing the machine's starts:
#   1. SageAttention's and FlashAttention 3's Hopper kernels, built by the engine's builders on the CPU while the
#      plain calls run on the GPU;
#   2. the levers at 480p, 189 frames: the plain call, the compiled plain call, the exact bf16 engine (with its
#      request in parts) on cuDNN's attention and on FlashAttention 3's, fp8 products with 8-bit attention
#      (FlashAttention 3's fp8 forward: exact and with the step cache, interval 3; SageAttention's: exact);
#   3. the attention kernels alone at 480p/189 and 720p/93;
#   4. the levers at 720p, 93 frames (the plain call, the exact engine on both kernels, 8-bit attention, with and
#      without the cache), unless SKIP_720P=1.
# VARIANTS names the engine's variants (benchmarks/gpu/levers_gpu.py --quantizations) where fewer are wanted, and
# VARIANTS_720P those at 720p (default: VARIANTS); SageAttention is built and measured only where a variant names it.
# COMPILED_PLAIN=0 leaves out the compiled plain call (about 3.5 minutes at 480p).
# Each step writes its JSON as it goes, so what finished is kept if the machine is taken back.
#
#   OMNI_STUDIO_SAGE_SOURCE=SRC OMNI_STUDIO_FLASH3_SOURCE=FA_SRC benchmarks/gpu/clip_length_runs.sh OUT_DIR
set -u
out=${1:?usage: clip_length_runs.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
stamp() { echo "$(date -u +%H:%M:%S) $*" >>"$out/steps.log"; }
variants=${VARIANTS:-bf16,flash3,fp8-flash3-fp8,fp8-sage}
policies=(--bf16-policies exact --policies-of flash3=exact --policies-of fp8-sage=exact --policies exact,taylor/3)

variants_720p=${VARIANTS_720P:-$variants}
sage=--no-sage
[[ "$variants,$variants_720p" == *sage* ]] && sage=--sage

stamp "kernel builds"
(
    python3 -m studio.engine.gpu.flash3_build
    if [ "$sage" = --sage ]; then python3 -m studio.engine.gpu.sage_build; fi
) >"$out/kernel_build.log" 2>&1 &
build=$!

stamp "levers 480p 189"
compiled=--compiled-plain
[ "${COMPILED_PLAIN:-1}" = 0 ] && compiled=--no-compiled-plain
python3 benchmarks/gpu/levers_gpu.py --out "$out/levers_480p" --tiers 480p --frames 189 "$compiled" \
    --quantizations "$variants" "${policies[@]}" >"$out/levers_480p.log" 2>&1
wait "$build"
stamp "kernel builds exit $?"

stamp "kernels"
shapes=480p:189,720p:93
[ "${SKIP_720P:-0}" = 1 ] && shapes=480p:189
python3 benchmarks/gpu/sage_attention_gpu.py --out "$out/kernels" --shapes "$shapes" "$sage" >"$out/kernels.log" 2>&1

if [ "${SKIP_720P:-0}" != 1 ]; then
    stamp "levers 720p 93"
    python3 benchmarks/gpu/levers_gpu.py --out "$out/levers_720p" --tiers 720p --frames 93 --no-compiled-plain \
        --quantizations "$variants_720p" "${policies[@]}" >"$out/levers_720p.log" 2>&1
fi
stamp "done"
