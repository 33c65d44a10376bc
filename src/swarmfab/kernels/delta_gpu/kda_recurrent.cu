// KDA forward in CUDA: the per-token recurrence (decode and short sequences).
//
// Same mathematics as swarmfab.workloads.delta.math.recurrent, per (batch, value head):
//   S = diag(exp g_t) S;  u = beta_t (v_t - S^T k_t);  S += k_t u^T;  o_t = S^T (scale q_t)
// Value columns of S evolve independently, so one block owns (batch, value head, a tile
// of KDA_BV columns). Each column is shared by KDA_KSPLIT consecutive lanes of a warp,
// each holding every KDA_KSPLIT-th row; the two dot products over K are reduced with
// warp shuffles. KDA_STATE_SHARED puts the state tile in shared memory instead of
// registers. The knob #defines above this comment are written by swarmfab.
//
// Exported with the workload's C ABI (pointers are device pointers, launched on the
// legacy default stream, which orders it with PyTorch's default stream):
//   int kda_forward(q, k, v, g, beta, h0, o, ht, scale, B, T, H, HV, K, V)
// 0 on success; 2: K or the tile is unsupported; 1000 + cudaError_t: the launch failed.
#include <cuda_runtime.h>
#include <stdint.h>

#ifndef KDA_BV
#define KDA_BV 32
#endif
#ifndef KDA_KSPLIT
#define KDA_KSPLIT 4
#endif
#ifndef KDA_STATE_SHARED
#define KDA_STATE_SHARED 0
#endif
#ifndef KDA_SYMBOL
#define KDA_SYMBOL kda_forward
#endif

static_assert(KDA_KSPLIT >= 1 && KDA_KSPLIT <= 32 && (KDA_KSPLIT & (KDA_KSPLIT - 1)) == 0,
              "KDA_KSPLIT must be a power of two up to a warp");
static_assert(KDA_BV * KDA_KSPLIT <= 1024, "a block has at most 1024 threads");

template <int KMAX>
__global__ void __launch_bounds__(KDA_BV * KDA_KSPLIT)
kda_recurrent_kernel(const float *__restrict__ q, const float *__restrict__ k,
                     const float *__restrict__ v, const float *__restrict__ g,
                     const float *__restrict__ beta, const float *__restrict__ h0,
                     float *__restrict__ o, float *__restrict__ ht, float scale,
                     int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V) {
    constexpr int ROWS = KMAX / KDA_KSPLIT;  // rows of the state each thread owns
    __shared__ float k_t[KMAX], q_t[KMAX], decay_t[KMAX];
#if KDA_STATE_SHARED
    __shared__ float tile[KMAX][KDA_BV];
#endif
    const int64_t bh = blockIdx.y, b = bh / HV, hv = bh % HV, h = hv / (HV / H);
    const int part = threadIdx.x % KDA_KSPLIT, local_col = threadIdx.x / KDA_KSPLIT;
    const int64_t col = (int64_t)blockIdx.x * KDA_BV + local_col;
    const bool live = col < V;
    const unsigned lanes = __activemask();

#if KDA_STATE_SHARED
#define STATE(j) tile[part + KDA_KSPLIT * (j)][local_col]
#else
    float state[ROWS];
#define STATE(j) state[j]
#endif
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const int64_t row = part + KDA_KSPLIT * j;
        STATE(j) = (h0 != nullptr && live && row < K) ? h0[(bh * K + row) * V + col] : 0.0f;
    }
    for (int64_t t = 0; t < T; ++t) {
        const int64_t qk_base = ((b * T + t) * H + h) * K;
        const int64_t token = (b * T + t) * HV + hv;
        for (int64_t i = threadIdx.x; i < KMAX; i += blockDim.x) {
            const bool inside = i < K;  // rows past K stay zero: they never contribute
            k_t[i] = inside ? k[qk_base + i] : 0.0f;
            q_t[i] = inside ? q[qk_base + i] * scale : 0.0f;
            decay_t[i] = inside ? __expf(g[token * K + i]) : 1.0f;
        }
        __syncthreads();
        float predicted = 0.0f;
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {
            const int row = part + KDA_KSPLIT * j;
            STATE(j) *= decay_t[row];
            predicted = fmaf(STATE(j), k_t[row], predicted);
        }
#pragma unroll
        for (int offset = KDA_KSPLIT / 2; offset > 0; offset /= 2)
            predicted += __shfl_xor_sync(lanes, predicted, offset);
        const float v_t = live ? v[token * V + col] : 0.0f;
        const float update = beta[token] * (v_t - predicted);
        float out = 0.0f;
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {
            const int row = part + KDA_KSPLIT * j;
            STATE(j) = fmaf(k_t[row], update, STATE(j));
            out = fmaf(STATE(j), q_t[row], out);
        }
#pragma unroll
        for (int offset = KDA_KSPLIT / 2; offset > 0; offset /= 2)
            out += __shfl_xor_sync(lanes, out, offset);
        if (live && part == 0) o[token * V + col] = out;
        __syncthreads();  // the next token overwrites k_t, q_t, decay_t
    }
    if (ht != nullptr && live) {
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {
            const int64_t row = part + KDA_KSPLIT * j;
            if (row < K) ht[(bh * K + row) * V + col] = STATE(j);
        }
    }
#undef STATE
}

template <int KMAX>
static int launch(const float *q, const float *k, const float *v, const float *g,
                  const float *beta, const float *h0, float *o, float *ht, float scale,
                  int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V) {
    const dim3 grid((unsigned)((V + KDA_BV - 1) / KDA_BV), (unsigned)(B * HV));
    kda_recurrent_kernel<KMAX><<<grid, KDA_BV * KDA_KSPLIT, 0, 0>>>(
        q, k, v, g, beta, h0, o, ht, scale, T, H, HV, K, V);
    const cudaError_t status = cudaGetLastError();
    return status == cudaSuccess ? 0 : 1000 + (int)status;
}

extern "C" int KDA_SYMBOL(const float *q, const float *k, const float *v, const float *g,
                          const float *beta, const float *h0, float *o, float *ht, float scale,
                          int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V) {
    if (B < 1 || T < 0 || H < 1 || HV % H != 0 || K < 1 || V < 1 || B * HV > 65535)
        return 2;
    // a state tile in shared memory must fit the 48 KiB of static shared memory
#define KDA_FITS(kmax) (!KDA_STATE_SHARED || (kmax) * KDA_BV * 4 + 3 * 4 * (kmax) <= 49152)
#if KDA_FITS(64)
    if (K <= 64)
        return launch<64>(q, k, v, g, beta, h0, o, ht, scale, B, T, H, HV, K, V);
#endif
#if KDA_FITS(128)
    if (K <= 128)
        return launch<128>(q, k, v, g, beta, h0, o, ht, scale, B, T, H, HV, K, V);
#endif
#if KDA_FITS(256)
    if (K <= 256)
        return launch<256>(q, k, v, g, beta, h0, o, ht, scale, B, T, H, HV, K, V);
#endif
    return 2;  // a larger key dimension (or this tile in shared memory) is not supported
}
