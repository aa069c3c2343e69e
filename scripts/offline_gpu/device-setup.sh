#!/usr/bin/env bash
# On the device machine, from the project root, after the staging commands that prepare.sh
# printed (each copied one .gpu/NN chunk folder to /root/stage on this same machine):
#
#   bash .gpu/run/device-setup.sh
#
# Assembles each payload from its pieces (checking its SHA-256), then builds
#   /tmp/gpu-site/torch-<torch version>   torch, torchvision (and triton, where carried)
#   /tmp/gpu-site/common                  small packages the image lacks
#   /tmp/gpu-site/vllm-<vLLM version>     vLLM, CuTe DSL, xgrammar
# for every vLLM version whose pieces were all staged; the others are skipped with a note.
# Safe to run again: finished folders are kept.  Then `source .gpu/run/device-env.sh VERSION`.
set -euo pipefail
RUN=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export HISPARSE_GPU_STAGE=${HISPARSE_GPU_STAGE:-/root/stage}
export HISPARSE_GPU_SITE=${HISPARSE_GPU_SITE:-/tmp/gpu-site}
exec python3 - "$RUN/manifest" <<'EOF'
import hashlib, os, shutil, subprocess, sys, time, zipfile

manifest = sys.argv[1]
stage, site = os.environ["HISPARSE_GPU_STAGE"], os.environ["HISPARSE_GPU_SITE"]
asm = os.path.join(site, ".assembled")
versions, payloads = [], {}
for line in open(manifest):
    f = line.rstrip("\n").split("\t")
    if f[0] == "V":
        versions.append((f[1], f[2]))
    elif f[0] == "P":
        target, method, name, parts, sha, size = f[1:7]
        payloads.setdefault(target, []).append((method, name, int(parts), sha, int(size)))


def marker(target):
    return os.path.join(site, target, ".done")


def signature(target):
    return "\n".join(f"{m} {n} {s}" for m, n, _, s, _ in payloads[target]) + "\n"


def done(target):
    try:
        return open(marker(target)).read() == signature(target)
    except OSError:
        return False


def pieces(name, parts):
    return [os.path.join(stage, f"{name}.part{i:03d}") for i in range(parts)]


def staged(target):
    return all(os.path.isfile(p) for _, n, k, _, _ in payloads[target] for p in pieces(n, k))


def assemble(name, parts, sha, size):
    os.makedirs(asm, exist_ok=True)
    path = os.path.join(asm, name)
    h = hashlib.sha256()
    with open(path, "wb") as out:
        for p in pieces(name, parts):
            with open(p, "rb") as f:
                while block := f.read(1 << 24):
                    h.update(block)
                    out.write(block)
    if h.hexdigest() != sha or os.path.getsize(path) != size:
        sys.exit(f"{name}: checksum mismatch after assembling {parts} pieces from {stage} "
                 "(a staging command was cut short? stage that chunk again)")
    return path


def unzip(path, dest):
    """Extract a wheel as unzip would, keeping the executable bits (ptxas, launchers)."""
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            out = z.extract(info, dest)
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                os.chmod(out, mode)


def build(target):
    t0 = time.monotonic()
    dest = os.path.join(site, target)
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    wheels = []
    for method, name, parts, sha, size in payloads[target]:
        path = assemble(name, parts, sha, size)
        if method == "unzip":
            unzip(path, dest)
            os.remove(path)
        else:
            wheels.append(path)
    if wheels:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
             "--no-compile", "--no-cache-dir", "--upgrade", "--disable-pip-version-check",
             "--target", dest, *os.environ.get("HISPARSE_GPU_PIP_EXTRA", "").split(), *wheels],
            capture_output=True, text=True)
        noise = [l for l in proc.stderr.splitlines() if "already exists" not in l and l.strip()]
        if proc.returncode != 0:
            sys.exit(f"pip install into {dest} failed:\n" + "\n".join(noise[-30:]))
        for w in wheels:
            os.remove(w)
    with open(marker(target), "w") as f:
        f.write(signature(target))
    print(f"  {target}: assembled in {time.monotonic() - t0:.0f} s", flush=True)


ready, skipped = [], []
for v, tv in versions:
    targets = [f"torch-{tv}", "common", f"vllm-{v}"]
    missing = [t for t in targets if not done(t) and not staged(t)]
    if missing:
        skipped.append(f"{v} (pieces of {', '.join(missing)} not in {stage})")
        continue
    for t in targets:
        if not done(t):
            build(t)
    ready.append(f"{v} (torch {tv})")
shutil.rmtree(asm, ignore_errors=True)
for s in skipped:
    print(f"gpu-site: skipped vLLM {s}")
if not ready:
    sys.exit("gpu-site: no vLLM version is complete: run every staging command prepare.sh printed")
print(f"gpu-site ready in {site}: vLLM {', '.join(ready)}")
EOF
