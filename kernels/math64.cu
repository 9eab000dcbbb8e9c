// 64-bit integer and double-precision arithmetic.
extern "C" __global__ void int64_ops(const long long* a, const long long* b, long long* out, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    long long x = a[i];
    long long y = b[i];
    unsigned long long ux = (unsigned long long)x;
    unsigned long long uy = (unsigned long long)y;
    long long* o = out + 10 * i;
    o[0] = x * y;
    o[1] = y != 0 ? x / y : 0;
    o[2] = y != 0 ? x % y : 0;
    o[3] = (long long)(uy != 0 ? ux / uy : 0);
    o[4] = (long long)(uy != 0 ? ux % uy : 0);
    o[5] = x >> (y & 63);
    o[6] = (long long)(ux >> (uy & 63));
    o[7] = (long long)__umul64hi(ux, uy);
    o[8] = __mul64hi(x, y);
    o[9] = (long long)__popcll(ux) + __clzll(x) * 100 + (long long)__ffsll(y) * 10000;
}

extern "C" __global__ void f64_ops(const double* a, const double* b, double* out, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    double x = a[i];
    double y = b[i];
    double* o = out + 8 * i;
    o[0] = __dadd_rn(x, y);
    o[1] = __dmul_rn(x, y);
    o[2] = __ddiv_rn(x, y);
    o[3] = __dsqrt_rn(fabs(x));
    o[4] = __fma_rn(x, y, 1.0);
    o[5] = __dadd_rz(x, y);
    o[6] = __dmul_ru(x, y);
    o[7] = fmin(x, y) + (double)(long long)y;
}

// float <-> int conversions with every rounding mode.
extern "C" __global__ void conversions(const float* f, const double* d, const int* k, unsigned int* out, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    float x = f[i];
    double y = d[i];
    int z = k[i];
    unsigned int* o = out + 16 * i;
    o[0] = (unsigned int)__float2int_rn(x);
    o[1] = (unsigned int)__float2int_rz(x);
    o[2] = (unsigned int)__float2int_rd(x);
    o[3] = (unsigned int)__float2int_ru(x);
    o[4] = __float2uint_rn(x);
    o[5] = __float_as_uint(__int2float_rn(z));
    o[6] = __float_as_uint(__int2float_rz(z));
    o[7] = __float_as_uint(__int2float_rd(z));
    o[8] = __float_as_uint(__int2float_ru(z));
    o[9] = __float_as_uint(__double2float_rn(y));
    o[10] = __float_as_uint(__double2float_rz(y));
    o[11] = __float_as_uint(__double2float_rd(y));
    o[12] = __float_as_uint(__double2float_ru(y));
    o[13] = (unsigned int)__double2int_rn(y);
    o[14] = (unsigned int)(long long)__double2ll_rz(y);
    o[15] = __float_as_uint(__ull2float_rn((unsigned long long)(long long)z * 0x10001ull));
}
