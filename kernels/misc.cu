#include <cassert>
#include <cstdio>

// Bit manipulation intrinsics.
extern "C" __global__ void bits(const unsigned int* a, const unsigned int* b, unsigned int* out, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    unsigned int x = a[i];
    unsigned int y = b[i];
    unsigned int* o = out + 10 * i;
    o[0] = __popc(x);
    o[1] = __clz(x);
    o[2] = __brev(x);
    o[3] = __byte_perm(x, y, 0x5140);
    o[4] = __funnelshift_l(x, y, y & 31);
    o[5] = __funnelshift_r(x, y, y);
    o[6] = (x >> (y % 24)) & 0xffu;
    o[7] = __ffs(x);
    o[8] = (unsigned int)max((int)x, (int)y) ^ min(x, y);
    o[9] = __umulhi(x, y) + __usad(x, y, 1u) + (unsigned int)__mulhi((int)x, (int)y);
}

__constant__ int lut[8] = {3, 1, 4, 1, 5, 9, 2, 6};
__device__ unsigned int counter;

// Constant-memory table, a module-level __device__ variable and printf.
extern "C" __global__ void lookup(unsigned int* out, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = lut[i % 8] * 10 + atomicAdd(&counter, 0u) * 0;
        atomicAdd(&counter, 1u);
    }
    if (i == 0) {
        printf("lookup: n=%u lut[5]=%d pi~%.3f %s\n", n, lut[5], 3.14159, "ok");
    }
}

extern "C" __global__ void read_counter(unsigned int* out)
{
    *out = counter;
}

// Device-side assert.
extern "C" __global__ void checked(const int* in)
{
    assert(in[threadIdx.x] >= 0);
}
