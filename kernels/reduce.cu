// Reductions: shared-memory tree, warp shuffles, grid-stride loops.

// Block-wide sum in dynamic shared memory; one partial sum per block. blockDim.x must be a
// power of two. Each thread first accumulates a grid-stride slice.
extern "C" __global__ void block_sum(const unsigned int* in, unsigned int* partial, unsigned int n)
{
    extern __shared__ unsigned int sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int acc = 0;
    for (unsigned int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) {
        acc += in[i];
    }
    sdata[tid] = acc;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        partial[blockIdx.x] = sdata[0];
    }
}

__device__ float warp_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

// Float sum with warp shuffles: each warp reduces, warp leaders combine through shared memory,
// block results are added with atomicAdd. The summation order is fixed per block; blocks add in
// an unspecified order, so tests use values whose sums are exact.
extern "C" __global__ void shfl_sum(const float* in, float* out, unsigned int n)
{
    __shared__ float warp_sums[32];
    float v = 0.0f;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        v += in[i];
    }
    v = warp_sum(v);
    unsigned int lane = threadIdx.x % 32;
    unsigned int warp = threadIdx.x / 32;
    if (lane == 0) {
        warp_sums[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        unsigned int nwarps = (blockDim.x + 31) / 32;
        v = lane < nwarps ? warp_sums[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) {
            atomicAdd(out, v);
        }
    }
}

// Per-block maximum with shfl_xor (butterfly) and an integer atomicMax across blocks.
extern "C" __global__ void max_reduce(const int* in, int* out, unsigned int n)
{
    int v = -2147483647 - 1;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        v = max(v, in[i]);
    }
    for (int mask = 16; mask > 0; mask >>= 1) {
        v = max(v, __shfl_xor_sync(0xffffffffu, v, mask));
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMax(out, v);
    }
}
