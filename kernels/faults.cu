// Kernels that misbehave on purpose, for fault and deadline tests.

// Thread 0 writes out[offset] = 1; tests pass an offset far outside the allocation.
extern "C" __global__ void write_out_of_bounds(unsigned int* out, unsigned long long offset)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[offset] = 1;
    }
}

// Spins while *flag == 0. Nobody sets it: it runs until the deadline (step limit) stops it.
extern "C" __global__ void spin_forever(volatile unsigned int* flag)
{
    while (*flag == 0) {
    }
}

// Does nothing; benchmarks time launch overhead with it.
extern "C" __global__ void empty()
{
}
