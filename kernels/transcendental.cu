// Library math (IEEE-op sequences, so the emulator matches the GPU bit for bit) and the hardware
// approximations (__sinf etc., which the emulator computes to within their documented error).
extern "C" __global__ void libm_f32(const float* x, float* out, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    float v = x[i];
    float* o = out + 8 * i;
    o[0] = sinf(v);
    o[1] = cosf(v);
    o[2] = expf(v);
    o[3] = logf(fabsf(v) + 1.0f);
    o[4] = sqrtf(fabsf(v));
    o[5] = powf(fabsf(v) + 0.5f, 1.7f);
    o[6] = tanhf(v);
    o[7] = atan2f(v, 0.75f);
}

extern "C" __global__ void intrinsics_f32(const float* x, float* out, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    float v = x[i];
    float* o = out + 6 * i;
    o[0] = __sinf(v);
    o[1] = __cosf(v);
    o[2] = __expf(v);
    o[3] = __logf(fabsf(v) + 1.0f);
    o[4] = __fdividef(v, 3.0f);
    o[5] = rsqrtf(fabsf(v) + 1.0f);
}

extern "C" __global__ void libm_f64(const double* x, double* out, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    double v = x[i];
    double* o = out + 4 * i;
    o[0] = sin(v);
    o[1] = exp(v);
    o[2] = log(fabs(v) + 1.0);
    o[3] = sqrt(fabs(v));
}
