// Device-function calls (kept out of line) with arrays in local memory and by-value structs.

struct Params {
    float scale;
    int offset;
    unsigned long long bias;
    short tag;
};

__device__ __noinline__ int sum_of_squares(const int* v, int n)
{
    int s = 0;
    for (int i = 0; i < n; ++i) {
        s += v[i] * v[i];
    }
    return s;
}

__device__ __noinline__ void fill_digits(unsigned int x, int* digits, int* count)
{
    int c = 0;
    do {
        digits[c++] = x % 10;
        x /= 10;
    } while (x != 0);
    *count = c;
}

// out[i] = sum of squares of the decimal digits of i*p.offset, with the digit array indexed
// dynamically (so it lives in local memory), plus struct fields.
extern "C" __global__ void digits_kernel(unsigned int* out, Params p, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    int digits[12];
    int count = 0;
    fill_digits(i * (unsigned int)p.offset, digits, &count);
    int s = sum_of_squares(digits, count);
    out[i] = (unsigned int)s + (unsigned int)(p.scale * 2.0f) + (unsigned int)p.bias + (unsigned int)p.tag;
}

struct Vec3 {
    float x, y, z;
};

__device__ __noinline__ Vec3 cross(Vec3 a, Vec3 b)
{
    Vec3 r;
    r.x = __fsub_rn(__fmul_rn(a.y, b.z), __fmul_rn(a.z, b.y));
    r.y = __fsub_rn(__fmul_rn(a.z, b.x), __fmul_rn(a.x, b.z));
    r.z = __fsub_rn(__fmul_rn(a.x, b.y), __fmul_rn(a.y, b.x));
    return r;
}

extern "C" __global__ void cross_kernel(const Vec3* a, Vec3 b, Vec3* out, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = cross(a[i], b);
    }
}
