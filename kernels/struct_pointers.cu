// A kernel taking a struct by value that holds two device pointers: the host places each
// buffer's address inside the struct's bytes (a `relocated` kernel argument).

struct Operands {
    const int* a;
    const int* b;
    int scale;
};

// out[i] = a[i] * scale + b[i] for i < n, reading through both of the struct's pointers.
extern "C" __global__ void scaled_sum(int* out, Operands ops, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = ops.a[i] * ops.scale + ops.b[i];
    }
}
