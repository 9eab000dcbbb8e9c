// 5-point Jacobi step on a W x H grid (2D grid of 2D blocks); the border is copied.
extern "C" __global__ void jacobi5(const float* in, float* out, int W, int H)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) {
        return;
    }
    int i = y * W + x;
    if (x == 0 || y == 0 || x == W - 1 || y == H - 1) {
        out[i] = in[i];
        return;
    }
    float s = __fadd_rn(__fadd_rn(in[i - 1], in[i + 1]), __fadd_rn(in[i - W], in[i + W]));
    out[i] = __fmul_rn(0.25f, s);
}

// Integer 3x3 box sum with a shared-memory halo, 16x16 blocks.
extern "C" __global__ void box3(const int* in, int* out, int W, int H)
{
    __shared__ int tile[18][18];
    int x = blockIdx.x * 16 + threadIdx.x;
    int y = blockIdx.y * 16 + threadIdx.y;
    for (int dy = threadIdx.y; dy < 18; dy += 16) {
        for (int dx = threadIdx.x; dx < 18; dx += 16) {
            int gx = blockIdx.x * 16 + dx - 1;
            int gy = blockIdx.y * 16 + dy - 1;
            tile[dy][dx] = (gx >= 0 && gy >= 0 && gx < W && gy < H) ? in[gy * W + gx] : 0;
        }
    }
    __syncthreads();
    if (x < W && y < H) {
        int s = 0;
        for (int dy = 0; dy < 3; ++dy) {
            for (int dx = 0; dx < 3; ++dx) {
                s += tile[threadIdx.y + dy][threadIdx.x + dx];
            }
        }
        out[y * W + x] = s;
    }
}
