// 256-bin byte histogram: per-block counts in shared memory, merged into global with atomics.
extern "C" __global__ void histogram256(const unsigned char* data, unsigned int n, unsigned int* bins)
{
    __shared__ unsigned int local[256];
    for (unsigned int b = threadIdx.x; b < 256; b += blockDim.x) {
        local[b] = 0;
    }
    __syncthreads();
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        atomicAdd(&local[data[i]], 1u);
    }
    __syncthreads();
    for (unsigned int b = threadIdx.x; b < 256; b += blockDim.x) {
        if (local[b] != 0) {
            atomicAdd(&bins[b], local[b]);
        }
    }
}

// Every global atomic flavour on one small array of counters.
extern "C" __global__ void atomics_mix(unsigned int* u, int* s, unsigned long long* u64, float* f, double* d,
                                       unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    atomicAdd(&u[0], i);
    atomicSub(&u[1], 1u);
    atomicMax(&u[2], i * 7u % 1000u);
    atomicMin(&u[3], i + 5u);
    atomicInc(&u[4], 9u);
    atomicDec(&u[5], 100u);
    atomicOr(&u[6], 1u << (i % 32));
    atomicAnd(&u[7], ~(1u << (i % 32)));
    atomicXor(&u[8], i);
    atomicExch(&u[9], 42u);
    unsigned int old = atomicCAS(&u[10], i, i + 1);  // a chain: succeeds exactly once per value
    (void)old;
    atomicMax(&s[0], (int)i - 500);
    atomicMin(&s[1], (int)i - 500);
    atomicAdd(&u64[0], (unsigned long long)i << 20);
    atomicAdd(&f[0], 0.5f);
    atomicAdd(&d[0], 0.25);
}
