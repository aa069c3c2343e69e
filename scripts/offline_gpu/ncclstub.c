/* NCCL entry points that the carried torch links but the device image's NCCL 2.28.9 lacks.
 *
 *   torch 2.13.0 (built against NCCL 2.29.7): the first eight below.
 *   torch 2.14.0 (built against NCCL 2.30.7): those eight and the last three.
 *
 * Preloaded (LD_PRELOAD) only so that libtorch_cuda.so loads.  A single-GPU engine never
 * calls any of them; if something did, it would get ncclInvalidUsage (5).  Two GPUs (TP=2,
 * DP=2): vLLM calls none of them, and torch's collectives are not expected to (read from
 * the symbols' names only); docs/gpu.md "Two GPUs" has the reading.  prepare.sh
 * checks this list against the symbols of each carried torch and of the image's NCCL:
 * every missing symbol must be here, and nothing here may exist in the image's NCCL
 * (a stub must never shadow a real function).
 */
#define STUB(name) int name(void) { return 5; }
STUB(ncclCommMemStats) STUB(ncclCommResume) STUB(ncclCommSuspend)
STUB(ncclGetLsaMultimemDevicePointer) STUB(ncclGetPeerDevicePointer)
STUB(ncclPutSignal) STUB(ncclSignal) STUB(ncclWaitSignal)
STUB(ncclCommGetUniqueId) STUB(ncclCommGrow) STUB(ncclWinGetUserPtr)
