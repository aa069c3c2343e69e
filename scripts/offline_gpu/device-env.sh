# On the device machine, from the project root, after device-setup.sh:
#
#   source .gpu/run/device-env.sh 0.33.0
#
# Puts the chosen vLLM and the torch it was built for (0.31.0 / 0.32.0: torch 2.13.0;
# 0.33.0: torch 2.14.0, with its triton) ahead of the image's torch 2.11.  Nothing here
# touches HiSparse sizing, routing, CUDA-graph capture or the scheduler (README.md).
_hs_v=${1:?usage: source .gpu/run/device-env.sh VLLM_VERSION}
_hs_run=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_hs_site=${HISPARSE_GPU_SITE:-/tmp/gpu-site}
_hs_tv=$(awk -F'\t' -v v="$_hs_v" '$1=="V" && $2==v {print $3}' "$_hs_run/manifest")
if [ -z "$_hs_tv" ]; then
  echo "device-env: vLLM $_hs_v is not in this bundle (it has: $(awk -F'\t' '$1=="V" {printf "%s ", $2}' "$_hs_run/manifest"))" >&2
  return 1 2>/dev/null || exit 1
fi
if [ ! -f "$_hs_site/vllm-$_hs_v/.done" ] || [ ! -f "$_hs_site/torch-$_hs_tv/.done" ]; then
  echo "device-env: vLLM $_hs_v is not assembled in $_hs_site: stage its chunks, then run device-setup.sh" >&2
  return 1 2>/dev/null || exit 1
fi
_hs_pp=$_hs_site/vllm-$_hs_v
# nvidia-cutlass-dsl adds its dsl_packages folder through a .pth file, which --target skips.
[ -d "$_hs_site/vllm-$_hs_v/nvidia_cutlass_dsl/dsl_packages" ] && _hs_pp=$_hs_pp:$_hs_site/vllm-$_hs_v/nvidia_cutlass_dsl/dsl_packages
export PYTHONPATH=$_hs_pp:$_hs_site/torch-$_hs_tv:$_hs_site/common${PYTHONPATH:+:$PYTHONPATH}
# NCCL entry points the carried torch links and the image's NCCL 2.28 lacks (never called
# by a single-GPU run; two GPUs: docs/gpu.md; see ncclstub.c).
export LD_PRELOAD=$_hs_run/libncclstub.so${LD_PRELOAD:+:$LD_PRELOAD}
export PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1   # image cuDNN 9.19 vs 9.20/9.24 expected; nothing here runs cuDNN
export VLLM_USE_FLASHINFER_SAMPLER=0              # FlashInfer is not carried; vLLM samples with PyTorch
export PYTHONUNBUFFERED=1
export HISPARSE_GPU_VLLM=$_hs_v HISPARSE_GPU_TORCH=$_hs_tv
echo "device-env: vLLM $_hs_v on torch $_hs_tv"
unset _hs_v _hs_run _hs_site _hs_tv _hs_pp
