// optim_cuda.cu: the optimizer's op table on the GPU, optim_kernels_cuda (optim.h): AdamW, EMA, the
// squared gradient norm and Muon's element-wise steps (the CPU twins are optim.c's optim_kernels_cpu;
// Muon's GEMMs are backend_gemm's cuBLAS). fp32 throughout: the master weights, moments and gradients
// are fp32 buffers. Muon's squared norm stays on the device.
#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"

extern "C" {
#include "student/train/optim.h"
}

static cudaStream_t optim_stream(backend *be) { return (cudaStream_t)cuda_stream(be); }

static int optim_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (int)(b < 65535 * 16 ? b : 65535 * 16); // grid-stride loops cover the rest
}

// Each block sums its grid-stride slice in double, one atomicAdd per block.
__global__ static void optim_sum_squares_kernel(const float *g, int64_t n, double *out) {
    __shared__ double part[256];
    double s = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

static double cuda_optim_sum_squares(backend *be, const float *g, int64_t n) {
    double *d = NULL, h = 0;
    cuda_check(cudaMallocAsync((void **)&d, sizeof(double), optim_stream(be)));
    cuda_check(cudaMemsetAsync(d, 0, sizeof(double), optim_stream(be)));
    int blocks = optim_blocks(n, 256);
    if (blocks > 4096) blocks = 4096;
    if (n > 0) optim_sum_squares_kernel<<<blocks, 256, 0, optim_stream(be)>>>(g, n, d);
    cuda_check_launch();
    cuda_check(cudaMemcpyAsync(&h, d, sizeof(double), cudaMemcpyDeviceToHost, optim_stream(be)));
    cuda_check(cudaFreeAsync(d, optim_stream(be)));
    cuda_check(cudaStreamSynchronize(optim_stream(be)));
    return h;
}

__global__ static void optim_adamw_kernel(float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1,
                                          float b2, float eps, float wd, float gscale, float bc1, float bc2) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float gi = g[i] * gscale;
        float mi = b1 * m[i] + (1 - b1) * gi, vi = b2 * v[i] + (1 - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w[i]);
    }
}

static void cuda_optim_adamw(backend *be, float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1,
                             float b2, float eps, float wd, float gscale, float bc1, float bc2) {
    if (n <= 0) return;
    optim_adamw_kernel<<<optim_blocks(n, 256), 256, 0, optim_stream(be)>>>(w, g, m, v, n, lr, b1, b2, eps, wd, gscale, bc1, bc2);
    cuda_check_launch();
}

__global__ static void optim_ema_kernel(float *ema, const float *w, int64_t n, float decay) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        ema[i] = decay * ema[i] + (1 - decay) * w[i];
}

static void cuda_optim_ema_update(backend *be, float *ema, const float *w, int64_t n, float decay) {
    if (n <= 0) return;
    optim_ema_kernel<<<optim_blocks(n, 256), 256, 0, optim_stream(be)>>>(ema, w, n, decay);
    cuda_check_launch();
}

// Muon: m = mu m + s g; x = s g + mu m; *ss += sum x^2 (per block in double, one atomicAdd each).
__global__ static void optim_muon_momentum_kernel(float *x, float *m, const float *g, int64_t n, float gscale, float mu,
                                                  double *ss) {
    __shared__ double part[256];
    double s = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float gi = g[i] * gscale;
        float mi = mu * m[i] + gi;
        m[i] = mi;
        float xi = gi + mu * mi;
        x[i] = xi;
        s += (double)xi * xi;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(ss, part[0]);
}

static void cuda_optim_muon_momentum(backend *be, float *x, float *m, const float *g, int64_t n, float gscale,
                                     float mu, double *ss) {
    cuda_check(cudaMemsetAsync(ss, 0, sizeof(double), optim_stream(be)));
    if (n <= 0) return;
    int blocks = optim_blocks(n, 256);
    if (blocks > 4096) blocks = 4096;
    optim_muon_momentum_kernel<<<blocks, 256, 0, optim_stream(be)>>>(x, m, g, n, gscale, mu, ss);
    cuda_check_launch();
}

__global__ static void optim_muon_normalise_kernel(float *x, int64_t n, const double *ss) {
    float inv = (float)(1.0 / (sqrt(*ss) + 1e-7));
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= inv;
}

static void cuda_optim_muon_normalise(backend *be, float *x, int64_t n, const double *ss) {
    if (n <= 0) return;
    optim_muon_normalise_kernel<<<optim_blocks(n, 256), 256, 0, optim_stream(be)>>>(x, n, ss);
    cuda_check_launch();
}

__global__ static void optim_axpby_kernel(float *y, const float *x, int64_t n, float alpha, float beta) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = alpha * x[i] + beta * y[i];
}

static void cuda_optim_axpby(backend *be, float *y, const float *x, int64_t n, float alpha, float beta) {
    if (n <= 0) return;
    optim_axpby_kernel<<<optim_blocks(n, 256), 256, 0, optim_stream(be)>>>(y, x, n, alpha, beta);
    cuda_check_launch();
}

__global__ static void optim_muon_apply_kernel(float *w, const float *o, int64_t n, float decay, float lr_scaled) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        w[i] = w[i] * decay - lr_scaled * o[i];
}

static void cuda_optim_muon_apply(backend *be, float *w, const float *o, int64_t n, float decay, float lr_scaled) {
    if (n <= 0) return;
    optim_muon_apply_kernel<<<optim_blocks(n, 256), 256, 0, optim_stream(be)>>>(w, o, n, decay, lr_scaled);
    cuda_check_launch();
}

extern "C" const struct optim_kernels optim_kernels_cuda = {OPTIM_OPS(OP_FILL, cuda_optim_)};
