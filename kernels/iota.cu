// out[i] = i + 1 for i < n, one thread per element.
extern "C" __global__ void iota(unsigned int* out, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = i + 1;
    }
}
