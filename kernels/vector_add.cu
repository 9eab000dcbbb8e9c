// out[i] = k * i
extern "C" __global__ void fill_linear(unsigned int* out, unsigned int k, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = k * i;
    }
}

// c[i] = a[i] + b[i]
extern "C" __global__ void vector_add(const unsigned int* a, const unsigned int* b, unsigned int* c,
                                      unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
