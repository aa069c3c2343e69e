#!/usr/bin/env bash
# Build the offline bundle that puts the real vLLM + HiSparse engine on a CUDA machine
# that cannot reach a package index (see README.md beside this file).
#
#   bash scripts/offline_gpu/prepare.sh [VLLM_VERSION ...]     (default: 0.31.0 0.32.0 0.33.0)
#
# Run it from anywhere inside the project, on a machine that reaches PyPI.  For each vLLM
# version it reads the wheel's own pins (torch, torchvision, nvidia-cutlass-dsl, xgrammar;
# and torch's triton pin) and collects, as cp312 manylinux x86_64 wheels:
#   * the torch that vLLM version is built for (0.31.0 / 0.32.0: 2.13.0; 0.33.0: 2.14.0)
#     and its torchvision; for a torch the device image was not verified with, torch's
#     own triton (stripped of its Blackwell tools);
#   * vLLM, stripped of what a single-GPU Hopper run never loads (FlashAttention-2,
#     the SM100 FMHA kernels, QuTLASS, the vllm-rs binary, DeepGEMM builds for other
#     Pythons);
#   * the CuTe-DSL and xgrammar versions it pins, and a pinned set of small pure-Python
#     or small compiled packages that the device image lacks.
# CUDA, cuDNN, NCCL, cuBLAS and the rest of CUDA come from the device image (torch 2.11 +
# CUDA 13.0); libncclstub.so fills the NCCL entry points the newer torch links.
#
# Output (git-ignored): .gpu/NN/ chunk folders (one remote command carries at most 64 MiB,
# the working tree included, so a chunk is 64 MiB less the checkout's files and 3 MiB of
# room, unless HISPARSE_GPU_CHUNK_MIB says otherwise) and .gpu/run/ (the device scripts,
# the stub library and the manifest).  The downloads are cached in
# ${HISPARSE_GPU_CACHE:-~/.cache/hisparse-gpu} (about 3.5 GB for the three versions).
# At the end it prints the remote commands, in order.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=$ROOT/.gpu
CACHE=${HISPARSE_GPU_CACHE:-$HOME/.cache/hisparse-gpu}
CPU_CACHE=${HISPARSE_CACHE_DIR:-$HOME/.cache/hisparse-lab}   # the CPU cross-check's vLLM wheels
CARRY_MIB=64  # what one remote command may carry, the working tree included
# the working tree a remote command carries: tracked files and untracked ones git does not ignore
tree_bytes=$(cd "$ROOT" && { git ls-files -z; git ls-files -z --others --exclude-standard; } 2>/dev/null \
  | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
tree_mib=$((tree_bytes >> 20))
CHUNK_MIB=${HISPARSE_GPU_CHUNK_MIB:-$((CARRY_MIB - tree_mib - 3))}
case "$CHUNK_MIB" in  # a whole number from 8 to 63 (at most 2 digits: no overflow below)
  [89]|[1-5][0-9]|6[0-3]) ;;
  *) if [ -n "${HISPARSE_GPU_CHUNK_MIB:-}" ]; then
       echo "[offline_gpu] HISPARSE_GPU_CHUNK_MIB $CHUNK_MIB: not a size in MiB (a whole number, 8 to $((CARRY_MIB - 1)))" >&2
     else
       echo "[offline_gpu] the checkout's files take $tree_mib MiB of the $CARRY_MIB MiB a remote command carries: chunks of $CHUNK_MIB MiB are too small (8 at least; HISPARSE_GPU_CHUNK_MIB sets the size)" >&2
     fi
     exit 2 ;;
esac
if [ $((CHUNK_MIB + tree_mib)) -ge "$CARRY_MIB" ]; then
  echo "[offline_gpu] warning: chunks of $CHUNK_MIB MiB and the checkout's $tree_mib MiB exceed the $CARRY_MIB MiB a remote command carries" >&2
fi
IMAGE_NCCL=${HISPARSE_DEVICE_NCCL:-2.28.9}   # the device image's NCCL (torch 2.11.0+cu130's pin)
# torch versions verified to run with the device image's own triton (3.6.0); any other
# torch gets its pinned triton carried.
IMAGE_TRITON_OK=${HISPARSE_IMAGE_TRITON_OK:-2.13.0}
PY=${PYTHON:-python3}

if [ $# -gt 0 ]; then VERSIONS=("$@"); else VERSIONS=(0.31.0 0.32.0 0.33.0); fi

# Small packages the device image lacks (verified with vLLM 0.31.0 and 0.32.0 on the H200;
# orjson added for 0.33.0; the second block is what `vllm serve`'s OpenAI server imports once
# the engine is up -- uvicorn, the SageMaker routes' model-hosting-container-standards, the
# /metrics instrumentator -- and the openai package's httpx2 transport).  Same versions for
# every vLLM version.
COMMON=(annotated-types==0.8.0 apache-tvm-ffi==0.1.11 astor==0.8.1 blake3==1.0.11
  cachetools==8.0.2 cbor2==6.3.0 compressed-tensors==0.17.0 depyf==0.20.0 dill==0.4.1
  fastapi==0.136.3 frozendict==2.5.1 gguf==0.19.0 httpx2==2.16.2 ijson==3.6.0 jsonschema==4.26.0
  jsonschema-specifications==2025.9.1 llguidance==1.7.6 loguru==0.7.3 msgspec==0.23.0 openai==3.57.0
  openai-harmony==0.0.8 orjson==3.11.6 partial-json-parser==0.2.1.1.post7 pybase64==1.5.1
  pydantic==2.14.4 pydantic-core==2.50.5 python-json-logger==4.2.0 pyzmq==27.3.0 referencing==0.37.0
  rpds-py==2026.9.1 setproctitle==1.3.8 sniffio==1.3.1 starlette==1.10.0 typing-inspection==0.4.5
  watchfiles==1.3.0 quack-kernels==0.6.5 torch-c-dlpack-ext==0.1.5 "nvidia-cuda-nvdisasm>=13.3,<14"
  annotated-doc==0.0.7 click==8.5.1 h11==0.16.0 httpcore2==2.16.2 jiter==0.19.0 jmespath==1.1.0
  model-hosting-container-standards==0.1.16 prometheus-fastapi-instrumentator==8.1.0 supervisor==4.3.0
  truststore==0.10.5 uvicorn==0.55.0)

log() { echo "[offline_gpu] $*" >&2; }

dl() {  # dl DEST SPEC...  -- cp312 manylinux x86_64 wheels, no dependencies, quietly
  local dest=$1; shift; mkdir -p "$dest"
  local plat=() n
  for n in 17 18 24 26 27 28 31 34 35; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${plat[@]}" --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform linux_x86_64 --platform any \
    -d "$dest" "$@" 2> >(grep -v "is ignored: it is neither" >&2)
}

one() {  # one GLOB -> the single file matching it (error otherwise)
  local m=( $1 )
  [ ${#m[@]} -eq 1 ] && [ -f "${m[0]}" ] || { log "expected one file for $1, found: ${m[*]}"; exit 1; }
  echo "${m[0]}"
}

meta() { unzip -p "$1" '*.dist-info/METADATA'; }
pin() {  # pin WHEEL NAME -> the version after "NAME==" (extras and markers dropped)
  meta "$1" | grep -oiP "^Requires-Dist: $2(\[[^]]*\])?==\K[^;, ]+" | head -1
}

strip_wheel() {  # strip_wheel SRC DEST PATTERN...  -- copy SRC without the entries matching PATTERN
  local src=$1 dest=$2; shift 2
  [ -s "$dest" ] && return 0
  mkdir -p "$(dirname "$dest")"; cp "$src" "$dest.tmp"
  zip -q -d "$dest.tmp" "$@" >/dev/null || true     # patterns that match nothing are fine
  mv "$dest.tmp" "$dest"
}

mkdir -p "$CACHE/wheels" "$CACHE/stripped"
rm -rf "$OUT"/[0-9]* "$OUT/run"; mkdir -p "$OUT/run"
MANIFEST=$OUT/run/manifest; : > "$MANIFEST.payloads"; : > "$MANIFEST"

payload() {  # payload TARGET METHOD FILE  -- one line of the manifest (deduplicated)
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$MANIFEST.payloads"
}

TORCHES=()
for v in "${VERSIONS[@]}"; do
  # --- vLLM itself (reuse the CPU cross-check's download when it is there) ---------------
  w=$(ls "$CPU_CACHE"/wheels/vllm-$v/vllm-$v-*.whl "$CACHE"/wheels/vllm-$v-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$w" ]; then log "downloading vllm==$v"; dl "$CACHE/wheels" "vllm==$v"; w=$(one "$CACHE/wheels/vllm-$v-*.whl"); fi
  tv=$(pin "$w" torch); tvv=$(pin "$w" torchvision); cdsl=$(pin "$w" nvidia-cutlass-dsl)
  xg=$(pin "$w" xgrammar)
  [ -n "$tv" ] && [ -n "$tvv" ] && [ -n "$cdsl" ] && [ -n "$xg" ] || { log "could not read vLLM $v's pins"; exit 1; }
  log "vLLM $v: torch $tv, torchvision $tvv, nvidia-cutlass-dsl $cdsl, xgrammar $xg"
  sw=$CACHE/stripped/$(basename "$w")
  strip_wheel "$w" "$sw" 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/vllm-rs' \
    'vllm/_qutlass_C.abi3.so' 'vllm/third_party/fmha_sm100/*' \
    'vllm/third_party/deep_gemm/_C.cpython-310-*' 'vllm/third_party/deep_gemm/_C.cpython-311-*' \
    'vllm/third_party/deep_gemm/_C.cpython-313-*' 'vllm/third_party/deep_gemm/_C.cpython-314-*'
  printf 'V\t%s\t%s\n' "$v" "$tv" >> "$MANIFEST"

  # --- torch, torchvision (and triton where the image's is not known to work) -------------
  dl "$CACHE/wheels" "torch==$tv" "torchvision==$tvv"
  t=$(one "$CACHE/wheels/torch-$tv-cp312-*.whl")
  payload "torch-$tv" unzip "$t"
  payload "torch-$tv" pip "$(one "$CACHE/wheels/torchvision-$tvv-cp312-*.whl")"
  if [[ " $IMAGE_TRITON_OK " != *" $tv "* ]]; then
    trv=$(meta "$t" | grep -oP '^Requires-Dist: triton\s*[=~]=\s*\K[0-9.]+' | head -1)
    dl "$CACHE/wheels" "triton==$trv"
    tw=$(one "$CACHE/wheels/triton-$trv-cp312-*.whl")
    stw=$CACHE/stripped/$(basename "$tw")
    strip_wheel "$tw" "$stw" 'triton/backends/nvidia/bin/ptxas-blackwell' \
      'triton/backends/nvidia/lib/cupti-blackwell/*' 'triton/backends/nvidia/lib/cupti/*_static.a' \
      'triton/instrumentation/libGPUInstrumentationTestLib.so'
    payload "torch-$tv" unzip "$stw"
    log "torch $tv: carrying triton $trv (the image has 3.6.0)"
  fi
  [[ " ${TORCHES[*]} " == *" $tv "* ]] || TORCHES+=("$tv")

  # --- the kernels packages this vLLM version pins -----------------------------------------
  vdir=$CACHE/wheels/v$v
  dl "$vdir" "nvidia-cutlass-dsl==$cdsl" "nvidia-cutlass-dsl-libs-base==$cdsl" \
    "nvidia-cutlass-dsl-libs-core==$cdsl" "nvidia-cutlass-dsl-libs-cu13==$cdsl" "xgrammar==$xg"
  payload "vllm-$v" unzip "$sw"
  for f in "$vdir"/*.whl; do payload "vllm-$v" pip "$f"; done
done

# --- small dependencies missing from the image ----------------------------------------------
dl "$CACHE/wheels/common" "${COMMON[@]}"
for spec in "${COMMON[@]}"; do
  name=$(echo "${spec%%[=<>]*}" | tr '.-' '__' | tr 'A-Z' 'a-z')
  ver=""; [[ "$spec" == *==* ]] && ver=${spec##*==}
  f=$(ls "$CACHE"/wheels/common/*.whl | awk -v n="$name" -v v="$ver" '{b=tolower($0); sub(".*/","",b);
      split(b,a,"-"); if (a[1]==n && (v=="" || a[2]==v)) print $0}' | sort -V | tail -1)
  [ -n "$f" ] || { log "no wheel for $spec"; exit 1; }
  payload common pip "$f"
done

# --- NCCL: torch links NCCL entry points newer than the image's; check the stub covers them --
gcc -shared -fPIC -O2 -o "$OUT/run/libncclstub.so" "$HERE/ncclstub.c"
if command -v nm >/dev/null; then
  dl "$CACHE/wheels/image-nccl" "nvidia-nccl-cu13==$IMAGE_NCCL"
  syms=$CACHE/nccl-$IMAGE_NCCL.syms
  if [ ! -s "$syms" ]; then
    d=$(mktemp -d); unzip -q -o "$(one "$CACHE/wheels/image-nccl/nvidia_nccl_cu13-$IMAGE_NCCL-*.whl")" '*/libnccl.so*' -d "$d"
    nm -D --defined-only $(find "$d" -name 'libnccl.so*' | head -1) | awk '{print $3}' | sed 's/@.*//' | sort -u > "$syms"; rm -rf "$d"
  fi
  stubs=$(grep -oP 'STUB\(\K[A-Za-z0-9_]+' "$HERE/ncclstub.c" | sort -u)
  shadow=$(comm -12 <(echo "$stubs") "$syms")
  [ -z "$shadow" ] || { log "ncclstub.c would shadow real NCCL $IMAGE_NCCL functions: $shadow"; exit 1; }
  for tv in "${TORCHES[@]}"; do
    u=$CACHE/torch-$tv.nccl-undefined
    if [ ! -s "$u" ]; then
      d=$(mktemp -d); unzip -q -o "$(one "$CACHE/wheels/torch-$tv-cp312-*.whl")" 'torch/lib/*.so' -d "$d"
      for so in "$d"/torch/lib/*.so; do nm -D --undefined-only "$so" | awk '{print $2}'; done \
        | sed 's/@.*//' | grep -E '^nccl' | sort -u > "$u"; rm -rf "$d"
    fi
    missing=$(comm -23 "$u" "$syms" | comm -23 - <(echo "$stubs"))
    [ -z "$missing" ] || { log "torch $tv needs NCCL symbols neither NCCL $IMAGE_NCCL nor ncclstub.c has: $missing"; exit 1; }
    log "torch $tv: every NCCL symbol it links is in NCCL $IMAGE_NCCL or in libncclstub.so"
  done
else
  log "warning: nm not found; the NCCL stub list is not checked"
fi
cp "$HERE/device-setup.sh" "$HERE/device-env.sh" "$OUT/run/"

# --- cut the payloads into pieces and pack them into chunk folders -------------------------
"$PY" - "$OUT" "$MANIFEST" "$CHUNK_MIB" <<'EOF'
import hashlib, os, sys
out, manifest, chunk_mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
cap = chunk_mib << 20
rows, seen = [], set()
for line in open(manifest + ".payloads"):
    target, method, path = line.rstrip("\n").split("\t")
    if (target, path) in seen:
        continue
    seen.add((target, path))
    rows.append((target, method, path))
os.remove(manifest + ".payloads")
# One stream of every distinct file, cut every `cap` bytes: the fewest chunks possible.
files, order = {}, []
for _, _, path in rows:
    name = os.path.basename(path)
    if name not in files:
        files[name] = path
        order.append(name)
chunk, used, where = 1, 0, {}
lines = []
for name in order:
    path, size = files[name], os.path.getsize(files[name])
    h = hashlib.sha256()
    with open(path, "rb") as f:
        part, left = 0, size
        while left > 0:
            if used == cap:
                chunk, used = chunk + 1, 0
            n = min(left, cap - used)
            data = f.read(n)
            h.update(data)
            d = os.path.join(out, f"{chunk:02d}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"{name}.part{part:03d}"), "wb") as g:
                g.write(data)
            where.setdefault(name, set()).add(chunk)
            part, used, left = part + 1, used + n, left - n
    files[name] = (size, part, h.hexdigest())
with open(manifest, "a") as m:
    for target, method, path in rows:
        name = os.path.basename(path)
        size, parts, sha = files[name]
        m.write(f"P\t{target}\t{method}\t{name}\t{parts}\t{sha}\t{size}\n")
with open(os.path.join(out, "run", "chunks"), "w") as c:
    for name in order:
        c.write(name + "\t" + " ".join(f"{k:02d}" for k in sorted(where[name])) + "\n")
EOF

# --- the Jupyter kernel stack for executing a notebook on the device (.gpu/nb) ---------------
PYTHON=$PY bash "$HERE/notebook_kernel.sh"

# --- report -----------------------------------------------------------------------------------
total=$(du -cb "$OUT"/[0-9]*/* | tail -1 | cut -f1)
n=$(ls -d "$OUT"/[0-9]* | wc -l)
echo
echo "$n chunk folders of at most $CHUNK_MIB MiB (the checkout carried beside each: $tree_mib MiB), $((total >> 20)) MiB in all (.gpu/01 .. .gpu/$(printf %02d "$n")); .gpu/run: $(du -sh "$OUT/run" | cut -f1)"
for v in "${VERSIONS[@]}"; do
  tv=$(awk -F'\t' -v v="$v" '$1=="V" && $2==v {print $3}' "$MANIFEST")
  need=$(awk -F'\t' -v v="$v" -v t="$tv" '$1=="P" && ($2=="vllm-" v || $2=="torch-" t || $2=="common") {print $4}' "$MANIFEST" \
    | while read -r f; do awk -F'\t' -v f="$f" '$1==f {print $2}' "$OUT/run/chunks"; done | tr ' ' '\n' | sort -u | tr '\n' ' ')
  echo "  vLLM $v (torch $tv) needs chunks: $need"
done
echo
echo "On the device machine, one remote command per chunk folder, back to back (a machine is"
echo "given back after 30 s idle and a fresh one starts bare); each takes a few seconds:"
for d in "$OUT"/[0-9]*; do c=${d#$ROOT/}; echo "  carry [\"$c\"]   command: mkdir -p /root/stage && cp $c/* /root/stage/"; done
echo "To execute a notebook there too (scripts/gpu_notebook.sh), also carry [\".gpu/nb\"] once, same command."
echo "Then, on the same machine, carry [\".gpu/run\"] (plus your own ignored paths):"
echo "  bash .gpu/run/device-setup.sh && source .gpu/run/device-env.sh ${VERSIONS[0]} && <your command>"
echo "(device-env.sh VERSION selects that vLLM and the torch it needs; device-setup.sh assembles"
echo " every version whose chunks were staged and skips the others.)"
