// Compiled by NVRTC 12 (not nvcc), by kernels/regen.sh: NVRTC's PTX differs from nvcc's (its own
// front end defaults, no host pass), and an older ISA (.version 8.7). No includes: NVRTC has the
// device builtins (threadIdx, __shfl_*_sync, atomics) without headers.

// Inclusive prefix sum of each block's slice: warp shuffles, then the warp totals in shared.
extern "C" __global__ void block_scan(const unsigned int* in, unsigned int* out, unsigned int* block_totals, unsigned int n)
{
    __shared__ unsigned int warp_totals[32];
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned int v = i < n ? in[i] : 0;
    for (int d = 1; d < 32; d <<= 1) {
        unsigned int up = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += up;
    }
    if (lane == 31) warp_totals[warp] = v;
    __syncthreads();
    if (warp == 0) {
        unsigned int nw = (blockDim.x + 31) / 32;
        unsigned int t = lane < nw ? warp_totals[lane] : 0;
        for (int d = 1; d < 32; d <<= 1) {
            unsigned int up = __shfl_up_sync(0xffffffffu, t, d);
            if (lane >= d) t += up;
        }
        warp_totals[lane] = t;
    }
    __syncthreads();
    if (warp > 0) v += warp_totals[warp - 1];
    if (i < n) out[i] = v;
    if (threadIdx.x == blockDim.x - 1) block_totals[blockIdx.x] = v;
}

// Mixed integer/float work: 64-bit hash, float conversions, a data-dependent loop, atomics.
extern "C" __global__ void hash_stats(const unsigned long long* keys, float* scaled, unsigned int* buckets, int n, float scale)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long k = keys[i];
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    int steps = 0;
    for (unsigned long long x = k; x > 1 && steps < 64; ++steps) x = (x & 1) ? x / 3 : x >> 1;
    scaled[i] = (float)(long long)(k >> 11) * scale + (float)steps;
    atomicAdd(&buckets[k & 15], 1u);
}
