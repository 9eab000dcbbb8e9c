// Warp-level behaviour: divergence and reconvergence, vote, shuffles, __syncwarp.

// Lanes take different paths by parity and loop different trip counts, then meet again.
extern "C" __global__ void divergence(unsigned int* out)
{
    unsigned int t = threadIdx.x;
    unsigned int v = 0;
    if (t & 1) {
        for (unsigned int k = 0; k < t; ++k) {
            v += k;
        }
    } else {
        v = t * 1000;
        if (t % 4 == 0) {
            v += 7;
        }
    }
    // Reconverged: every lane votes.
    unsigned int odd = __ballot_sync(0xffffffffu, t & 1);
    out[t] = v + (odd == 0xaaaaaaaau ? 1u : 0u);
}

extern "C" __global__ void votes(const int* in, unsigned int* out)
{
    unsigned int t = threadIdx.x;
    int v = in[blockIdx.x * blockDim.x + t];
    unsigned int* o = out + 8 * (blockIdx.x * blockDim.x + t);
    o[0] = __ballot_sync(0xffffffffu, v > 0);
    o[1] = __any_sync(0xffffffffu, v > 100);
    o[2] = __all_sync(0xffffffffu, v != 0);
    o[3] = __activemask();
    o[4] = __shfl_sync(0xffffffffu, (unsigned int)v, 3);
    o[5] = __shfl_up_sync(0xffffffffu, (unsigned int)v, 2);
    o[6] = __shfl_sync(0xffffffffu, (unsigned int)v, (t + 5) % 8, 8);
    o[7] = __popc(__ballot_sync(0xffffffffu, v & 1)) + __reduce_add_sync(0xffffffffu, (unsigned int)v);
}

// Half the warp shuffles among itself inside a branch.
extern "C" __global__ void partial_warp(unsigned int* out)
{
    unsigned int t = threadIdx.x;
    unsigned int v = t * 3;
    if (t < 16) {
        v += __shfl_xor_sync(0x0000ffffu, v, 1);
        __syncwarp(0x0000ffffu);
    }
    out[t] = v;
}

// A shuffle naming an exited lane in its mask: a warp-op membership error.
extern "C" __global__ void bad_shuffle(unsigned int* out)
{
    unsigned int t = threadIdx.x;
    if (t == 5) {
        return;
    }
    out[t] = __shfl_sync(0xffffffffu, t, 0);
}

// The two warps of a 64-thread block wait at different named barriers, each expecting the whole
// block: neither can complete, which the emulator reports as a deadlock fault.
extern "C" __global__ void barrier_deadlock(unsigned int* out)
{
    if (threadIdx.x < 32) {
        asm volatile("bar.sync 1;" ::: "memory");
    } else {
        asm volatile("bar.sync 2;" ::: "memory");
    }
    out[threadIdx.x] = 1;
}

// Warp 0 finishes early; the other warps' __syncthreads() then counts only the threads that have
// not exited (sm_70+ semantics), so this completes.
extern "C" __global__ void barrier_after_exit(unsigned int* out)
{
    if (threadIdx.x < 32) {
        out[threadIdx.x] = 1;
        return;
    }
    __syncthreads();
    out[threadIdx.x] = 2;
    __syncthreads();
}

// __syncthreads_count / _and / _or.
extern "C" __global__ void sync_reduce(const int* in, unsigned int* out)
{
    int v = in[threadIdx.x];
    int c = __syncthreads_count(v > 0);
    int a = __syncthreads_and(v > -100);
    int o = __syncthreads_or(v == 7);
    if (threadIdx.x == 0) {
        out[0] = c;
        out[1] = a;
        out[2] = o;
    }
}
