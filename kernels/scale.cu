// x[i] *= factor. __fmul_rn keeps it a plain round-to-nearest f32 multiply that the compiler may
// never contract into an fma, so the emulator's result is bit-exact against the GPU.
extern "C" __global__ void scale(float* x, float factor, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = __fmul_rn(x[i], factor);
    }
}
