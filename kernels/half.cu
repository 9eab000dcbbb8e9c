#include <cuda_fp16.h>

// __half arithmetic: out[i] = fma(a, b, c) - a * 0.5 + max(a, b), computed in halves, stored as
// half and as float.
extern "C" __global__ void half_ops(const __half* a, const __half* b, const __half* c, __half* out, float* outf,
                                   unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    __half x = a[i];
    __half y = b[i];
    __half z = c[i];
    __half r = __hfma(x, y, z);
    r = __hsub(r, __hmul(x, __float2half(0.5f)));
    r = __hadd(r, __hmax(x, y));
    out[i] = r;
    outf[i] = __half2float(r) + __half2float(__hdiv(x, y));
}

// half2 vector ops.
extern "C" __global__ void half2_ops(const __half2* a, const __half2* b, __half2* out, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = __hfma2(a[i], b[i], __hadd2(a[i], b[i]));
    }
}
