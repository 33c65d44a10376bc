/*
 * Gated delta rule forward (KDA: decay per key channel; GDN: one decay per head and
 * token), chunked WY/UT form, for CPUs. Same C ABI as recurrent.c.
 *
 * A sequence is cut into chunks of CH_C tokens. Inside a chunk (positions i, j; G the
 * inclusive cumulative log decay, restarting at every chunk):
 *   Akk[i][j] = k_i . (k_j * exp(G_i - G_j))            j < i
 *   Aqk[i][j] = scale q_i . (k_j * exp(G_i - G_j))      j <= i
 *   (I + Diag(beta) Akk) [W | U] = Diag(beta) [K*exp(G) | V]   (forward substitution)
 * and with the incoming state S (K x V):
 *   V' = U - W S;  O = (scale Q*exp(G)) S + Aqk V';  S = exp(G_last) S + (K*exp(G_last-G))^T V'.
 *
 * Numerics: exp(G_i - G_j) is never split as exp(G_i) * exp(-G_j) over a whole chunk (strong
 * decay overflows float32). Rows are grouped in sub-blocks of 16 tokens; the block of row i
 * is anchored at the last token a before it, so every factor of the off-diagonal products,
 * exp(G_i - G_a) and exp(G_a - G_j), has a non-positive exponent. Inside a diagonal block the
 * factored form k_j / exp(G_j - G_a) is used only where the block's decay span is below
 * CH_SPAN_LIMIT; a block with stronger decay is computed pairwise, one exp per term.
 * The limit keeps the factored products in float32's normal range with room to spare: an
 * input times exp(-span) must not become subnormal (flushed to zero under -ffast-math).
 * With the limit at 80, q_i * exp(G_i - G_a) * scale fell below FLT_MIN for query
 * components near 1e-3, and a diagonal term q_i . k_i lost them (5e-4 relative, about one
 * strong-decay draw in 2000). At 40, inputs down to 3e-21 and up to 1e21 stay exact.
 *
 * Knobs (set as #defines by the design space):
 *   CH_C          chunk size (tokens)
 *   CH_VT         value columns per job (the state tile a job owns; V when not tiled)
 *   CH_BN         columns of the register-blocked micro-kernel (multiple of 16)
 *   CH_RB         rows of the register-blocked micro-kernel
 *   CH_UNROLL     unroll factor of the micro-kernel's reduction loop
 *   CH_PARALLEL   1: OpenMP over (batch, value head); 2: over (batch, value head, V tile)
 *   CH_SCHEDULE   OpenMP schedule kind (static, dynamic, guided)
 *   CH_THREADS    OpenMP thread count
 * Workload and shared helpers (exp, gate, output pages): common.h.
 */
#ifndef CH_C
#define CH_C 64
#endif
#ifndef CH_VT
#define CH_VT 128
#endif
#ifndef CH_BN
#define CH_BN 32
#endif
#ifndef CH_RB
#define CH_RB 4
#endif
#ifndef CH_UNROLL
#define CH_UNROLL 1
#endif
#ifndef CH_PARALLEL
#define CH_PARALLEL 1
#endif
#ifndef CH_SCHEDULE
#define CH_SCHEDULE static
#endif
#ifndef CH_THREADS
#define CH_THREADS 1
#endif

#define CH_SB 16              /* sub-block of rows sharing one anchor */
#define CH_SPAN_LIMIT 40.0f   /* exp(-40) ~ 4.2e-18: FLT_MIN / 4.2e-18 ~ 3e-21 */
#define CH_PRAGMA(x) _Pragma(#x)
#define CH_UNROLL_BY(n) CH_PRAGMA(GCC unroll n)
#define CH_UNROLL_PRAGMA CH_UNROLL_BY(CH_UNROLL)

/* Per-thread scratch, sized for one chunk of one job. */
typedef struct {
    float *G, *KA, *QA, *RT, *Akk, *Aqk, *W, *QG, *KD, *U, *O, *S, *beta;
    int64_t ld;  /* row stride of S, U and O: the widest value tile of a job */
} ch_work;

/*
 * C[m][n] += sum_p A(m, p) B[p][n] for m < M, n < N, p < P, with A(m, p) = A[m*am + p*ap].
 * Register-blocked: CH_RB rows by `BN` columns of C stay in registers over the whole
 * reduction (BN is a compile-time constant in every call, so the inner loops unroll into
 * vector registers); columns past the last full block fall back to 16, then to a plain loop.
 */
static inline __attribute__((always_inline)) void
gemm_block(const int BN, int rows, int P, const float *restrict A, int64_t am, int64_t ap,
           const float *restrict Bm, int64_t ldb, float *restrict Cm, int64_t ldc)
{
    float acc[CH_RB][CH_BN > 16 ? CH_BN : 16];
    for (int r = 0; r < CH_RB; r++)
#pragma omp simd
        for (int n = 0; n < BN; n++) acc[r][n] = r < rows ? Cm[r * ldc + n] : 0.0f;
    CH_UNROLL_PRAGMA
    for (int p = 0; p < P; p++) {
        const float *restrict b = Bm + p * ldb;
        for (int r = 0; r < CH_RB; r++) {
            const float a = r < rows ? A[r * am + p * ap] : 0.0f;
#pragma omp simd
            for (int n = 0; n < BN; n++) acc[r][n] += a * b[n];
        }
    }
    for (int r = 0; r < rows; r++)
#pragma omp simd
        for (int n = 0; n < BN; n++) Cm[r * ldc + n] = acc[r][n];
}

static inline __attribute__((always_inline)) void
gemm_rows(const int BN, int rows, int P, const float *restrict A, int64_t am, int64_t ap,
          const float *restrict Bm, int64_t ldb, float *restrict Cm, int64_t ldc)
{
    if (rows == CH_RB)
        gemm_block(BN, CH_RB, P, A, am, ap, Bm, ldb, Cm, ldc);
    else
        gemm_block(BN, rows, P, A, am, ap, Bm, ldb, Cm, ldc);
}

static void gemm_acc(int M, int N, int P, const float *restrict A, int64_t am, int64_t ap,
                     const float *restrict Bm, int64_t ldb, float *restrict Cm, int64_t ldc)
{
    const int n_wide = N / CH_BN * CH_BN, n_16 = N / 16 * 16;
    for (int m0 = 0; m0 < M; m0 += CH_RB) {
        const int rows = M - m0 < CH_RB ? M - m0 : CH_RB;
        const float *Am = A + m0 * am;
        float *Cr = Cm + m0 * ldc;
        for (int n0 = 0; n0 < n_wide; n0 += CH_BN)
            gemm_rows(CH_BN, rows, P, Am, am, ap, Bm + n0, ldb, Cr + n0, ldc);
        for (int n0 = n_wide; n0 < n_16; n0 += 16)
            gemm_rows(16, rows, P, Am, am, ap, Bm + n0, ldb, Cr + n0, ldc);
        for (int r = 0; r < rows && n_16 < N; r++) {
            float *restrict c = Cr + r * ldc;
            for (int p = 0; p < P; p++) {
                const float a = Am[r * am + p * ap];
                const float *restrict b = Bm + p * ldb;
#pragma omp simd
                for (int n = n_16; n < N; n++) c[n] += a * b[n];
            }
        }
    }
}

/* Akk and Aqk of one chunk of L tokens (rows of k, q already in w->KD / w->QG as raw). */
static void intra_chunk(ch_work *w, const float *kc, const float *qc, int L, int64_t K, float scale)
{
    const float *G = w->G;
    memset(w->Akk, 0, sizeof(float) * L * CH_C);  /* rows past L are never read */
    memset(w->Aqk, 0, sizeof(float) * L * CH_C);
    for (int i0 = 0; i0 < L; i0 += CH_SB) {
        const int i1 = i0 + CH_SB < L ? i0 + CH_SB : L;
        /* anchor: G of token i0 - 1 (zero before the chunk) */
        float anchor[K];
        for (int64_t d = 0; d < K; d++) anchor[d] = i0 ? G[(i0 - 1) * K + d] : 0.0f;
        int factored = 1;
        for (int64_t d = 0; d < K; d++)
            if (!(anchor[d] - G[(i1 - 1) * K + d] < CH_SPAN_LIMIT)) factored = 0;
        for (int i = i0; i < i1; i++) {
            float *ka = w->KA + i * K, *qa = w->QA + i * K;
#pragma omp simd
            for (int64_t d = 0; d < K; d++) {
                const float e = delta_exp(G[i * K + d] - anchor[d]);
                ka[d] = kc[i * K + d] * e;
                qa[d] = qc[i * K + d] * e * scale;
            }
        }
        /* right factors, transposed: RT[d][j] for j < i0 (all <= 1), and the diagonal block */
        for (int j = 0; j < i0; j++)
#pragma omp simd
            for (int64_t d = 0; d < K; d++)
                w->RT[d * CH_C + j] = kc[j * K + d] * delta_exp(anchor[d] - G[j * K + d]);
        const int width = factored ? i1 : i0;
        if (factored)
            for (int j = i0; j < i1; j++)
#pragma omp simd
                for (int64_t d = 0; d < K; d++)
                    w->RT[d * CH_C + j] = kc[j * K + d] * delta_exp(anchor[d] - G[j * K + d]);
        if (width > 0) {
            gemm_acc(i1 - i0, width, (int)K, w->KA + i0 * K, K, 1, w->RT, CH_C,
                     w->Akk + i0 * CH_C, CH_C);
            gemm_acc(i1 - i0, width, (int)K, w->QA + i0 * K, K, 1, w->RT, CH_C,
                     w->Aqk + i0 * CH_C, CH_C);
        }
        if (!factored) /* strong decay inside the block: one exp per term */
            for (int i = i0; i < i1; i++)
                for (int j = i0; j <= i; j++) {
                    float skk = 0.0f, sqk = 0.0f;
#pragma omp simd reduction(+ : skk, sqk)
                    for (int64_t d = 0; d < K; d++) {
                        const float kd = kc[j * K + d] * delta_exp(G[i * K + d] - G[j * K + d]);
                        skk += kc[i * K + d] * kd;
                        sqk += qc[i * K + d] * kd;
                    }
                    w->Akk[i * CH_C + j] = skk;
                    w->Aqk[i * CH_C + j] = sqk * scale;
                }
        for (int i = i0; i < i1; i++) { /* keep the strict / inclusive lower triangles */
            for (int j = i; j < width; j++) w->Akk[i * CH_C + j] = 0.0f;
            for (int j = i + 1; j < width; j++) w->Aqk[i * CH_C + j] = 0.0f;
        }
    }
}

/* One (batch, value head, value tile) over the whole sequence. */
static void run_job(const delta_args *a, ch_work *w, int64_t b, int64_t hv, int64_t v0, int vw)
{
    const int64_t K = a->K, V = a->V, T = a->T, h = hv / (a->HV / a->H);
    float *S = w->S;
    const int64_t state = delta_state(a, b, hv);
    for (int64_t d = 0; d < K; d++)
        for (int j = 0; j < vw; j++)
            S[d * w->ld + j] = a->h0 ? a->h0[state + d * V + v0 + j] : 0.0f;
    float *kc = w->KD, *qc = w->QG;  /* raw rows first, rewritten in place below */
    for (int64_t t0 = 0; t0 < T; t0 += CH_C) {
        const int L = (int)(T - t0 < CH_C ? T - t0 : CH_C);
        for (int i = 0; i < L; i++) {
            const int64_t tok = (b * T + t0 + i) * a->HV + hv;
            const int64_t qk = ((b * T + t0 + i) * a->H + h) * K;
            memcpy(kc + i * K, a->k + qk, sizeof(float) * K);
            memcpy(qc + i * K, a->q + qk, sizeof(float) * K);
            w->beta[i] = a->beta[tok];
            for (int64_t d = 0; d < K; d++)
                w->G[i * K + d] = (i ? w->G[(i - 1) * K + d] : 0.0f)
                                 + delta_floor_gate(delta_gate(a, tok, d));
        }
        intra_chunk(w, kc, qc, L, K, a->scale);
        /* W = (I + Diag(beta) Akk)^-1 Diag(beta) K*exp(G), U likewise with V: forward
         * substitution by blocks of CH_SB rows; what earlier blocks contribute is one
         * register-blocked product, the rest row by row inside the block */
        for (int i = 0; i < L; i++) {
            const int64_t tok = (b * T + t0 + i) * a->HV + hv;
            const float bi = w->beta[i];
            float *wi = w->W + i * K, *ui = w->U + i * w->ld, *ei = w->KA + i * K;
            const float *vi = a->v + tok * V + v0;
#pragma omp simd
            for (int64_t d = 0; d < K; d++) {
                ei[d] = delta_exp(w->G[i * K + d]);  /* exp(G_i) <= 1, kept for the readout */
                wi[d] = bi * kc[i * K + d] * ei[d];
            }
#pragma omp simd
            for (int j = 0; j < vw; j++) ui[j] = bi * vi[j];
            for (int j = 0; j < i; j++) w->Akk[i * CH_C + j] *= -bi;  /* -Diag(beta) Akk */
        }
        for (int i0 = 0; i0 < L; i0 += CH_SB) {
            const int i1 = i0 + CH_SB < L ? i0 + CH_SB : L;
            if (i0 > 0) {
                gemm_acc(i1 - i0, (int)K, i0, w->Akk + i0 * CH_C, CH_C, 1, w->W, K,
                         w->W + i0 * K, K);
                gemm_acc(i1 - i0, vw, i0, w->Akk + i0 * CH_C, CH_C, 1, w->U, w->ld,
                         w->U + i0 * w->ld, w->ld);
            }
            for (int i = i0; i < i1; i++)
                for (int j = i0; j < i; j++) {
                    const float l = w->Akk[i * CH_C + j];
                    float *wi = w->W + i * K, *ui = w->U + i * w->ld;
                    const float *wj = w->W + j * K, *uj = w->U + j * w->ld;
#pragma omp simd
                    for (int64_t d = 0; d < K; d++) wi[d] += l * wj[d];
#pragma omp simd
                    for (int n = 0; n < vw; n++) ui[n] += l * uj[n];
                }
        }
        /* V' = U - W S (W negated in place: the micro-kernel only accumulates) */
        for (int64_t x = 0; x < (int64_t)L * K; x++) w->W[x] = -w->W[x];
        gemm_acc(L, vw, (int)K, w->W, K, 1, S, w->ld, w->U, w->ld);
        /* O = (scale Q*exp(G)) S + Aqk V' */
        const float *Glast = w->G + (L - 1) * K;
        for (int i = 0; i < L; i++)
#pragma omp simd
            for (int64_t d = 0; d < K; d++) {
                qc[i * K + d] *= a->scale * w->KA[i * K + d];
                kc[i * K + d] *= delta_exp(Glast[d] - w->G[i * K + d]);
            }
        memset(w->O, 0, sizeof(float) * L * w->ld);
        gemm_acc(L, vw, (int)K, qc, K, 1, S, w->ld, w->O, w->ld);
        gemm_acc(L, vw, L, w->Aqk, CH_C, 1, w->U, w->ld, w->O, w->ld);
        for (int i = 0; i < L; i++) {
            const int64_t tok = (b * T + t0 + i) * a->HV + hv;
            memcpy(a->o + tok * V + v0, w->O + i * w->ld, sizeof(float) * vw);
        }
        /* S = Diag(exp(G_last)) S + (K*exp(G_last - G))^T V' */
        for (int64_t d = 0; d < K; d++) {
            const float decay = delta_exp(Glast[d]);
#pragma omp simd
            for (int j = 0; j < vw; j++) S[d * w->ld + j] *= decay;
        }
        gemm_acc((int)K, vw, L, kc, 1, K, w->U, w->ld, S, w->ld);
    }
    if (a->ht)
        for (int64_t d = 0; d < K; d++)
            memcpy(a->ht + state + d * V + v0, S + d * w->ld, sizeof(float) * vw);
}

static float *take(float **cursor, size_t count)
{
    float *block = *cursor;
    *cursor += (count + 15) / 16 * 16;  /* every block 64-byte aligned */
    return block;
}

static void *work_alloc(ch_work *w, int64_t K, int64_t tile)
{
    const size_t ck = (size_t)CH_C * K, cv = (size_t)CH_C * tile, cc = (size_t)CH_C * CH_C;
    const size_t total = 7 * (ck + 16) + 2 * (cc + 16) + 2 * (cv + 16)
                       + ((size_t)K * tile + 16) + (CH_C + 16);
    w->ld = tile;
    float *base = aligned_alloc(64, (total * sizeof(float) + 63) / 64 * 64);
    if (!base) return NULL;
    float *cursor = base;
    w->G = take(&cursor, ck); w->KA = take(&cursor, ck); w->QA = take(&cursor, ck);
    w->W = take(&cursor, ck); w->QG = take(&cursor, ck); w->KD = take(&cursor, ck);
    w->RT = take(&cursor, (size_t)K * CH_C); w->Akk = take(&cursor, cc);
    w->Aqk = take(&cursor, cc); w->U = take(&cursor, cv); w->O = take(&cursor, cv);
    w->S = take(&cursor, (size_t)K * tile); w->beta = take(&cursor, CH_C);
    return base;
}

static int delta_run(const delta_args *a)
{
    const int64_t B = a->B, HV = a->HV, K = a->K, V = a->V;
    if (K > 4096) return 1;  /* the anchor row lives on the stack */
    advise_outputs(a, CH_THREADS);
#if CH_PARALLEL == 2
    const int64_t tile = CH_VT;
#else
    const int64_t tile = V;
#endif
    const int64_t tiles = (V + tile - 1) / tile, jobs = B * HV * tiles;
    int failed = 0;
#pragma omp parallel num_threads(CH_THREADS) reduction(| : failed)
    {
        ch_work w = {0};
        void *base = work_alloc(&w, K, tile);
        if (!base) failed = 1;
#pragma omp for schedule(CH_SCHEDULE)
        for (int64_t job = 0; job < jobs; job++) {
            if (!base) continue;
            const int64_t v0 = job % tiles * tile;
            const int vw = (int)(V - v0 < tile ? V - v0 : tile);
            run_job(a, &w, job / (HV * tiles), job / tiles % HV, v0, vw);
        }
        free(base);
    }
    return failed ? 2 : 0;
}
