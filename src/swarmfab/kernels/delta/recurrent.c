/*
 * Gated delta rule forward (KDA: decay per key channel; GDN: one decay per head and
 * token), per-token recurrence, for CPUs. Same C ABI as chunked.c.
 *
 * Each value column of the K x V state evolves independently, so the state is tiled by
 * value columns (RC_BV wide): a tile stays in L1/L2 while a block of RC_NB tokens runs
 * over it, and tiles never exchange data. Per token and tile:
 *   acc = S^T k;  u = beta (v - acc);  S += k u^T;  o = scale S^T q   (S decayed first).
 * Queries, keys and decays of a block are prepared once per (batch, value head) and
 * shared by its tiles. A key-major tile that V leaves partial runs the whole tile's code
 * on zero-padded columns (tile_values): one copy of the code, compiled in a third of the
 * time a second copy with variable trip counts took, and faster on such shapes.
 *
 * Deferred decay (RC_DEFERRED 1): the state is kept as S = Diag(c) S~, c the product of
 * the decays since the last renormalisation (log c = L, per key channel). Then
 *   acc = S~^T (k c);  S~ += (k / c) u^T;  o = S~^T (scale q c)
 * and the decay costs nothing per element. When some |L| exceeds RC_LOG_LIMIT the rows
 * of S~ are multiplied by c and L restarts at 0, so k / c stays below exp(RC_LOG_LIMIT)
 * and nothing overflows, strong decay included (it renormalises every token there).
 *
 * Knobs (set as #defines by the design space):
 *   RC_BV        value columns per state tile
 *   RC_NB        tokens prepared at once (a block): its rescaled rows of q and k, read by
 *                every sweep of every tile, stay in L1 beside a 16 KB tile when the block
 *                is short (16 tokens: 32 KB at K = 128); the next block's inputs are asked
 *                for this many tokens ahead
 *   RC_PASSES    sweeps over a tile per token: 4 (decay; S^T k; update; readout),
 *                2 (decay with S^T k; update with readout), or 1 (update, readout and the
 *                next token's decay and S^T k in one sweep: one load and one store per
 *                state element and token)
 *   RC_DEFERRED  0: decay the state every token; 1: deferred decay (above)
 *   RC_PARALLEL  0: serial; 1: OpenMP over (batch, value head); 2: also over tiles
 *   RC_THREADS   OpenMP thread count
 *   RC_SCHEDULE  OpenMP schedule kind of the job loop (static, dynamic, guided)
 *   RC_VMAJOR    0: tile rows are key channels (K rows of RC_BV values);
 *                1: tile rows are value columns (RC_BV rows of K keys, dot products)
 *   RC_ROWS      key-major: state rows per step of a sweep, each with its own partial
 *                sums (the reductions' dependency chains get shorter, registers fewer)
 *   RC_STREAM    1: outputs written with non-temporal stores (whole lines, AVX or AVX-512)
 *   RC_PREFETCH  1: while a block runs, ask for the next block's inputs (q, k, g, beta)
 *                and for each tile's values RC_V_AHEAD tokens ahead (software prefetch)
 *   RC_STATE_AHEAD 1: ask for the initial state of the job after this one, so the next
 *                job's loads find it in cache (its slot is anywhere in a pool): at prefill
 *                while a job writes its final state, a row of one per row of the other;
 *                at decode, which moves little but states, throughout the job's sweeps in
 *                address order (rc_ahead_state)
 *   RC_GROUP     0, or tokens per group (deferred decay, key-major): one sweep projects
 *                the state on the keys and queries of a whole group, a small triangular
 *                recurrence over the group gives each token's update and output, and a
 *                second sweep applies the group's updates: per state element and token
 *                still three multiply-adds, but 2/RC_GROUP loads and 1/RC_GROUP stores.
 *                A group renormalises at its start when |L| would pass the limit
 *                inside it; one that still must renormalise later (strong decay) and a
 *                block's last partial group run token by token. The projection sweeps a
 *                tile in slices of RC_GW columns, as many as half the ISA's vector
 *                registers hold partial sums for (the tile's own width with AVX-512 and
 *                groups of 4; 8 columns on AVX2). With RC_PASSES 1 a group's update
 *                sweep also projects the next group of the block: one load and one store
 *                per state element and group.
 *   RC_HEADS     heads a job runs side by side, block by block (at most; whole-head jobs
 *                only): a token's rows of q, k, g, v and o lie H*K or HV*V floats apart, a
 *                new page per token and head at H*K >= 1024, and neighbouring heads share
 *                those pages, so the heads of a job translate each page once. Their states
 *                (RC_HEADS_BYTES at most) stay in L2 between blocks.
 *   RC_DECODE_DIRECT 1: a call of one token per sequence (decode) updates each state where
 *                it lies, in two sweeps over its rows and no working copy: the first reads
 *                S^T (k d) and S^T (q d) (d the token's decay), the second writes
 *                d S + k u^T. One load from memory, one from cache and one store per state
 *                element, against the tiles' copy in, sweeps and copy out.
 */
#ifndef RC_BV
#define RC_BV 32
#endif
#ifndef RC_PASSES
#define RC_PASSES 2
#endif
#ifndef RC_DEFERRED
#define RC_DEFERRED 0
#endif
#ifndef RC_PARALLEL
#define RC_PARALLEL 1
#endif
#ifndef RC_THREADS
#define RC_THREADS 1
#endif
#ifndef RC_SCHEDULE
#define RC_SCHEDULE static
#endif
#ifndef RC_VMAJOR
#define RC_VMAJOR 0
#endif
#ifndef RC_ROWS
#define RC_ROWS 2
#endif
#ifndef RC_GROUP
#define RC_GROUP 0
#endif
#define RC_GROUP_SLOTS (RC_GROUP ? RC_GROUP : 1)
/* Columns of a group's projection in flight: its 2 RC_GROUP rows of partial sums take
 * half the ISA's vector registers (16 before AVX-512, 32 with it), the rest holding the
 * row, the broadcast weights and the updates' values; one vector at least, never more
 * than the tile. On AVX2 the sums once filled all 16 registers and spilled: halving the
 * slice ran groups of 2 1.4x and groups of 4 1.1x faster (2-core Zen 3). */
#if defined(__AVX512F__)
#define RC_VREGS 32
#define RC_VFLOATS 16
#elif defined(__AVX__)
#define RC_VREGS 16
#define RC_VFLOATS 8
#else
#define RC_VREGS 16
#define RC_VFLOATS 4
#endif
#define RC_GW_SUMS (RC_VREGS / 2 * RC_VFLOATS / (2 * RC_GROUP_SLOTS))
#define RC_GW_FIT (RC_GW_SUMS > RC_VFLOATS ? RC_GW_SUMS : RC_VFLOATS)
#define RC_GW (RC_BV < RC_GW_FIT ? RC_BV : RC_GW_FIT)
#ifndef RC_STREAM
#define RC_STREAM 0
#endif
#ifndef RC_PREFETCH
#define RC_PREFETCH 0
#endif
#ifndef RC_STATE_AHEAD
#define RC_STATE_AHEAD 0
#endif
#ifndef RC_DECODE_DIRECT
#define RC_DECODE_DIRECT 0
#endif
#ifndef RC_HEADS
#define RC_HEADS 1
#endif
#define RC_HEADS_BYTES (256 * 1024)  /* a job's states, within a 512 KB L2 beside the rest */
#if RC_STREAM && defined(__AVX__)
#include <immintrin.h>
#endif

/* A token's outputs for one tile. RC_STREAM: whole 64-byte lines go straight to memory
 * (non-temporal stores, two 32-byte halves before AVX-512): the outputs are not read
 * again, and the line is not fetched first. Elsewhere (partial lines, no AVX) plain
 * stores. 1.06-1.43x at prefill on AVX-512 hosts; 1.01-1.02x on a 2-core Zen 3 (AVX2). */
static inline __attribute__((always_inline)) void
store_outputs(float *restrict ot, const float *restrict out, const int bv)
{
#if RC_STREAM && defined(__AVX512F__)
    if (bv % 16 == 0 && ((uintptr_t)ot & 63) == 0) {
        for (int j = 0; j < bv; j += 16) _mm512_stream_ps(ot + j, _mm512_loadu_ps(out + j));
        return;
    }
#elif RC_STREAM && defined(__AVX__)
    if (bv % 16 == 0 && ((uintptr_t)ot & 63) == 0) {
        for (int j = 0; j < bv; j += 8) _mm256_stream_ps(ot + j, _mm256_loadu_ps(out + j));
        return;
    }
#endif
    for (int j = 0; j < bv; j++) ot[j] = out[j];
}

#define RC_UNROLL _Pragma("GCC unroll 16")
#ifndef RC_NB
#define RC_NB 64               /* tokens prepared at once */
#endif
#define RC_V_AHEAD 4           /* tokens ahead a tile asks for its values */

/* A token's rows of q, k, g and v lie H*K or HV*V floats from the previous token's: too
 * far apart for the hardware's prefetchers, which stay within a page. Without help,
 * prepare() and the first read of each tile's values wait on memory, once per line.
 * These ask for the lines early (into L2), while the sweeps keep the cores busy. */
static inline __attribute__((always_inline)) void
prefetch_lines(const float *first, int64_t count)
{
    for (int64_t i = 0; i < count; i += 16) __builtin_prefetch(first + i, 0, 2);
}

/* A tile's share of the next block's inputs (RC_PREFETCH): keys [from, to) of each row
 * of q, k and g, and beta (and a scalar gate) where from is 0. A job's tiles split the
 * rows between them, so the requests spread over the whole block: asked for all at once
 * by the first tile, they waited on the core's outstanding misses (sharing: 1.06-1.11x
 * at the 32 MiB prefill shapes on a 2-core Zen 3). */
typedef struct { int64_t from, to; } rc_share;

static inline rc_share tile_share(int64_t K, int64_t part, int64_t parts)
{
    const int64_t lines = (K + 15) / 16, per = (lines + parts - 1) / parts;
    const int64_t from = part * per * 16, to = (part + 1) * per * 16;
    return (rc_share){ from < K ? from : K, to < K ? to : K };
}

/* A share of what prepare() reads of token t (batch b, value head hv), if t is in range. */
static inline __attribute__((always_inline)) void
prefetch_inputs(const delta_args *a, int64_t b, int64_t hv, int64_t t, rc_share share)
{
    if (t >= a->T) return;
    const int64_t K = a->K, row = b * a->T + t, h = hv / (a->HV / a->H);
    const int64_t tok = row * a->HV + hv, keys = share.to - share.from;
    prefetch_lines(a->q + (row * a->H + h) * K + share.from, keys);
    prefetch_lines(a->k + (row * a->H + h) * K + share.from, keys);
    if (!DELTA_SCALAR_GATE) prefetch_lines(a->g + tok * K + share.from, keys);
    if (share.from) return;
    if (DELTA_SCALAR_GATE) prefetch_lines(a->g + tok, 1);
    prefetch_lines(a->beta + tok, 1);
}

/* Before token t of a tile (RC_PREFETCH only): ask for its values RC_V_AHEAD tokens on,
 * and for its share of the inputs prepare() reads one block on. */
static inline __attribute__((always_inline)) void
before_token(const delta_args *a, int64_t b, int64_t hv, int64_t t, int64_t v0, const int bv,
             rc_share ahead)
{
    if (!RC_PREFETCH) return;
    if (t + RC_V_AHEAD < a->T)
        prefetch_lines(a->v + ((b * a->T + t + RC_V_AHEAD) * a->HV + hv) * a->V + v0, bv);
    prefetch_inputs(a, b, hv, t + RC_NB, ahead);
}

#if !RC_VMAJOR
/* A token's values for one key-major tile: where they lie when the tile is whole, else
 * copied into pad with zeros past its nv valid columns. A partial tile runs the whole
 * tile's code (constant trip counts, one copy of it compiled) on state columns that start
 * at zero; with zero values their updates stay zero, and their outputs are not stored. */
static inline __attribute__((always_inline)) const float *
tile_values(const float *vt, int nv, float *restrict pad)
{
    if (nv == RC_BV) return vt;
    for (int j = 0; j < RC_BV; j++) pad[j] = j < nv ? vt[j] : 0.0f;
    return pad;
}
#endif

#define RC_LOG_LIMIT 30.0f     /* exp(30) ~ 1e13: keys rescaled by 1/c stay far from overflow */
#define RC_AT(S, i, j, K) (S)[RC_VMAJOR ? (j) * (K) + (i) : (i) * RC_BV + (j)]

/* One job's scratch: a prepared block of tokens and the state tiles it owns. */
typedef struct {
    float *QC;     /* RC_NB x K: scale * q * c             (readout) */
    float *KC;     /* RC_NB x K: k * c                     (S^T k) */
    float *KI;     /* RC_NB x K: k / c                     (update) */
    float *SC;     /* RC_NB x K: what the state is scaled by before token s, where scaled[s] */
    float *beta, *acc;
    float *S;      /* the job's state tiles, head after head */
    float *L;      /* the log decays since the last renormalisation of the head prepared */
    float *logs;   /* every head's L, K floats each */
    float *DK;     /* RC_NB x RC_GROUP: (k_a / c_a) . (k_s c_s) for group-mates a < s */
    float *DQ;     /* RC_NB x RC_GROUP: (k_a / c_a) . (scale q_s c_s) for a <= s */
    unsigned char *scaled;
} rc_work;

#if RC_GROUP
/* The dot products within the group of RC_GROUP tokens from block index g, in one pass
 * over the keys: DK[s][a] = (k_a / c_a) . (k_s c_s) for a < s and DQ[s][a] = (k_a / c_a)
 * . (scale q_s c_s) for a <= s, each pair's partial sums in lanes of its own: every pair
 * its own chain of multiply-adds, the group's rows loaded once for all. A loop per pair,
 * each waiting on one accumulator, made prepare() alone 2.2x slower (Zen 3, AVX2). */
static inline __attribute__((always_inline)) void
group_dots(rc_work *w, int64_t K, int g)
{
    const float *restrict ki = w->KI + g * K, *restrict kc = w->KC + g * K,
                *restrict qc = w->QC + g * K;
    float dk[RC_GROUP][RC_GROUP][RC_VFLOATS], dq[RC_GROUP][RC_GROUP][RC_VFLOATS];
    RC_UNROLL
    for (int s = 0; s < RC_GROUP; s++)
        RC_UNROLL
        for (int a = 0; a < RC_GROUP; a++)
            for (int j = 0; j < RC_VFLOATS; j++) { dk[s][a][j] = 0.0f; dq[s][a][j] = 0.0f; }
    int64_t d0 = 0;
    for (; d0 + RC_VFLOATS <= K; d0 += RC_VFLOATS)
        RC_UNROLL
        for (int s = 0; s < RC_GROUP; s++)
            RC_UNROLL
            for (int a = 0; a <= s; a++)
#pragma omp simd
                for (int j = 0; j < RC_VFLOATS; j++) {
                    const float x = ki[a * K + d0 + j];
                    if (a < s) dk[s][a][j] += x * kc[s * K + d0 + j];
                    dq[s][a][j] += x * qc[s * K + d0 + j];
                }
    for (int64_t d = d0; d < K; d++)  /* the keys past the last whole vector */
        for (int s = 0; s < RC_GROUP; s++)
            for (int a = 0; a <= s; a++) {
                dk[s][a][0] += ki[a * K + d] * kc[s * K + d];
                dq[s][a][0] += ki[a * K + d] * qc[s * K + d];
            }
    for (int s = 0; s < RC_GROUP; s++)
        for (int a = 0; a < RC_GROUP; a++) {
            float sk = 0.0f, sq = 0.0f;
            for (int j = 0; j < RC_VFLOATS; j++) { sk += dk[s][a][j]; sq += dq[s][a][j]; }
            w->DK[(g + s) * RC_GROUP + a] = a < s ? sk : 0.0f;
            w->DQ[(g + s) * RC_GROUP + a] = a <= s ? sq : 0.0f;
        }
}
#endif

/* Prepare n tokens from t0 of (batch b, value head hv): rescaled q and k, state scales.
 * Everything a loop reads is a local restrict pointer, so each loop vectorises (exp too). */
static void prepare(const delta_args *a, rc_work *w, int64_t b, int64_t hv, int64_t t0, int n)
{
    const int64_t K = a->K, h = hv / (a->HV / a->H);
    const float scale = a->scale;
    for (int s = 0; s < n; s++) {
        const int64_t row = b * a->T + t0 + s, tok = row * a->HV + hv;
        const float *restrict q = a->q + (row * a->H + h) * K, *restrict k = a->k + (row * a->H + h) * K;
        const float *restrict gt = a->g + tok * (DELTA_SCALAR_GATE ? 1 : K);
        float *restrict qc = w->QC + s * K, *restrict kc = w->KC + s * K;
        float *restrict ki = w->KI + s * K, *restrict sc = w->SC + s * K;
        w->beta[s] = a->beta[tok];
#if RC_DEFERRED
        float *restrict L = w->L;
        int renormalise = 0;
#pragma omp simd reduction(| : renormalise)
        for (int64_t d = 0; d < K; d++) {
            L[d] += gt[DELTA_SCALAR_GATE ? 0 : d];
            renormalise |= fabsf(L[d]) > RC_LOG_LIMIT;
        }
#if RC_GROUP
        if (!renormalise && s % RC_GROUP == 0 && s + RC_GROUP <= n) {
            /* renormalise at the start of a group rather than inside it, where the
             * group would run token by token */
            const int64_t stride = a->HV * (DELTA_SCALAR_GATE ? 1 : K);
#pragma omp simd reduction(| : renormalise)
            for (int64_t d = 0; d < K; d++) {
                float ahead = L[d];
                for (int m = 1; m < RC_GROUP; m++) {
                    ahead += gt[m * stride + (DELTA_SCALAR_GATE ? 0 : d)];
                    renormalise |= fabsf(ahead) > RC_LOG_LIMIT;
                }
            }
        }
#endif
        w->scaled[s] = (unsigned char)renormalise;
        if (renormalise)
#pragma omp simd
            for (int64_t d = 0; d < K; d++) { sc[d] = delta_exp(L[d]); L[d] = 0.0f; }
#pragma omp simd
        for (int64_t d = 0; d < K; d++) {
            const float c = delta_exp_in_range(L[d]);  /* |L| <= RC_LOG_LIMIT here */
            qc[d] = scale * q[d] * c;
            kc[d] = k[d] * c;
            ki[d] = k[d] / c;
        }
#else
        w->scaled[s] = 1;
#pragma omp simd
        for (int64_t d = 0; d < K; d++) {
            sc[d] = delta_exp(gt[DELTA_SCALAR_GATE ? 0 : d]);
            qc[d] = scale * q[d];
            kc[d] = k[d];
            ki[d] = k[d];
        }
#endif
    }
#if RC_GROUP
    for (int g = 0; g + RC_GROUP <= n; g += RC_GROUP)  /* full groups from the block start */
        group_dots(w, K, g);
#endif
}

#if !RC_VMAJOR
/* acc = S^T kc, first multiplying the rows of S by sc when `scaled` (and storing them),
 * with RC_ROWS partial sums (one per row of a group). */
static inline __attribute__((always_inline)) void
sweep_project(float *restrict S, int64_t K, const int bv, const float *restrict sc, int scaled,
              const float *restrict kc, float *restrict acc)
{
    float part[RC_ROWS][RC_BV];
    for (int r = 0; r < RC_ROWS; r++)
        for (int j = 0; j < bv; j++) part[r][j] = 0.0f;
    int64_t i = 0;
    for (; i + RC_ROWS <= K; i += RC_ROWS) {
        if (scaled) {
            for (int r = 0; r < RC_ROWS; r++) {
                float *restrict row = S + (i + r) * RC_BV;
                const float d = sc[i + r], k = kc[i + r];
#pragma omp simd
                for (int j = 0; j < bv; j++) { row[j] *= d; part[r][j] += row[j] * k; }
            }
        } else {
            for (int r = 0; r < RC_ROWS; r++) {
                const float *restrict row = S + (i + r) * RC_BV;
                const float k = kc[i + r];
#pragma omp simd
                for (int j = 0; j < bv; j++) part[r][j] += row[j] * k;
            }
        }
    }
    for (; i < K; i++) {
        float *restrict row = S + i * RC_BV;
        const float d = scaled ? sc[i] : 1.0f, k = kc[i];
        for (int j = 0; j < bv; j++) { row[j] *= d; part[0][j] += row[j] * k; }
    }
    for (int j = 0; j < bv; j++) {
        float sum = part[0][j];
        for (int r = 1; r < RC_ROWS; r++) sum += part[r][j];
        acc[j] = sum;
    }
}

enum { SWEEP_LAST, SWEEP_NEXT, SWEEP_SCALED_NEXT };

/* One row of the update sweep: row += ki u; out += row qc; then for the next token
 * (mode) row *= sc and acc += row kc. */
static inline __attribute__((always_inline)) void
update_row(float *restrict row, const int bv, const int mode, float k, float q, float d,
           float n, const float *restrict u, float *restrict out, float *restrict acc)
{
#pragma omp simd
    for (int j = 0; j < bv; j++) {
        float x = row[j] + k * u[j];
        out[j] += x * q;
        if (mode == SWEEP_SCALED_NEXT) x *= d;
        if (mode != SWEEP_LAST) acc[j] += x * n;
        row[j] = x;
    }
}

/* S += ki u^T and out = S^T qc; with SWEEP_NEXT also acc = S^T kc for the next token,
 * with SWEEP_SCALED_NEXT after multiplying the rows by sc (the next token's decay). */
static inline __attribute__((always_inline)) void
sweep_update(float *restrict S, int64_t K, const int bv, const int mode,
             const float *restrict ki, const float *restrict u, const float *restrict qc,
             float *restrict out, const float *restrict sc, const float *restrict kc,
             float *restrict acc)
{
    float o[RC_ROWS][RC_BV], a[RC_ROWS][RC_BV];
    for (int r = 0; r < RC_ROWS; r++)
        for (int j = 0; j < bv; j++) { o[r][j] = 0.0f; a[r][j] = 0.0f; }
    int64_t i = 0;
    for (; i + RC_ROWS <= K; i += RC_ROWS)
        for (int r = 0; r < RC_ROWS; r++)
            update_row(S + (i + r) * RC_BV, bv, mode, ki[i + r], qc[i + r],
                       mode == SWEEP_SCALED_NEXT ? sc[i + r] : 1.0f,
                       mode != SWEEP_LAST ? kc[i + r] : 0.0f, u, o[r], a[r]);
    for (; i < K; i++)
        update_row(S + i * RC_BV, bv, mode, ki[i], qc[i],
                   mode == SWEEP_SCALED_NEXT ? sc[i] : 1.0f, mode != SWEEP_LAST ? kc[i] : 0.0f,
                   u, o[0], a[0]);
    for (int j = 0; j < bv; j++) {
        float sum = o[0][j], next = a[0][j];
        for (int r = 1; r < RC_ROWS; r++) { sum += o[r][j]; next += a[r][j]; }
        out[j] = sum;
        if (mode != SWEEP_LAST) acc[j] = next;
    }
}

/* The textbook order: four plain loops per token (decay, S^T k, update, readout). */
static inline __attribute__((always_inline)) void
token_separate(float *restrict S, int64_t K, const int bv, const float *restrict sc, int scaled,
               const float *restrict kc, const float *restrict ki, const float *restrict qc,
               const float *restrict v, float bt, float *restrict out)
{
    float acc[RC_BV], u[RC_BV];
    if (scaled)
        for (int64_t i = 0; i < K; i++)
            for (int j = 0; j < bv; j++) S[i * RC_BV + j] *= sc[i];
    for (int j = 0; j < bv; j++) { acc[j] = 0.0f; out[j] = 0.0f; }
    for (int64_t i = 0; i < K; i++)
        for (int j = 0; j < bv; j++) acc[j] += S[i * RC_BV + j] * kc[i];
    for (int j = 0; j < bv; j++) u[j] = bt * (v[j] - acc[j]);
    for (int64_t i = 0; i < K; i++)
        for (int j = 0; j < bv; j++) S[i * RC_BV + j] += ki[i] * u[j];
    for (int64_t i = 0; i < K; i++)
        for (int j = 0; j < bv; j++) out[j] += S[i * RC_BV + j] * qc[i];
}

#if RC_GROUP
/* Columns [c0, c0 + cw) of a group's projection: acc[b] = S^T kc_{g+b} and out[b] =
 * S^T qc_{g+b}, summed in local arrays that the compiler keeps in vector registers. */
static inline __attribute__((always_inline)) void
project_columns(const float *restrict S, int64_t K, const float *restrict kc,
                const float *restrict qc, const int c0, const int cw,
                float acc[RC_GROUP][RC_BV], float out[RC_GROUP][RC_BV])
{
    float a[RC_GROUP][RC_GW], o[RC_GROUP][RC_GW];
    for (int b = 0; b < RC_GROUP; b++)
        for (int j = 0; j < cw; j++) { a[b][j] = 0.0f; o[b][j] = 0.0f; }
    for (int64_t i = 0; i < K; i++) {
        const float *restrict row = S + i * RC_BV + c0;
        RC_UNROLL
        for (int b = 0; b < RC_GROUP; b++) {
            const float k = kc[b * K + i], q = qc[b * K + i];
#pragma omp simd
            for (int j = 0; j < cw; j++) { a[b][j] += row[j] * k; o[b][j] += row[j] * q; }
        }
    }
    for (int b = 0; b < RC_GROUP; b++)
        for (int j = 0; j < cw; j++) { acc[b][c0 + j] = a[b][j]; out[b][c0 + j] = o[b][j]; }
}

/* For the group of RC_GROUP tokens from block index g: acc[b] = S^T kc_{g+b} and
 * out[b] = S^T qc_{g+b} (each row first scaled when token g renormalises), RC_GW columns
 * at a time: 2 RC_GROUP rows of partial sums as wide as the vector registers hold, where
 * a whole 32-column tile's would spill on a 16-register ISA (AVX2: 1.1-1.3x slower
 * prefill than 16-column tiles, which decode in turn runs 1.2-1.3x slower). */
static inline __attribute__((always_inline)) void
group_project(float *restrict S, int64_t K, const int bv, const rc_work *w, int g,
              float acc[RC_GROUP][RC_BV], float out[RC_GROUP][RC_BV])
{
    if (w->scaled[g]) {
        const float *restrict sc = w->SC + g * K;
        for (int64_t i = 0; i < K; i++) {
            float *restrict row = S + i * RC_BV;
            const float d = sc[i];
#pragma omp simd
            for (int j = 0; j < bv; j++) row[j] *= d;
        }
    }
    const float *restrict kc = w->KC + g * K, *restrict qc = w->QC + g * K;
    if (bv % RC_GW == 0)  /* whole slices: a constant trip count, fully vectorised */
        for (int c0 = 0; c0 < bv; c0 += RC_GW) project_columns(S, K, kc, qc, c0, RC_GW, acc, out);
    else
        for (int c0 = 0; c0 < bv; c0 += RC_GW)
            project_columns(S, K, kc, qc, c0, bv - c0 < RC_GW ? bv - c0 : RC_GW, acc, out);
}

/* S += sum_b ki_{g+b} u[b]^T: the group's updates in one sweep. */
static inline __attribute__((always_inline)) void
group_update(float *restrict S, int64_t K, const int bv, const float *restrict ki,
             float u[RC_GROUP][RC_BV])
{
    for (int64_t i = 0; i < K; i++) {
        float *restrict row = S + i * RC_BV;
        float k[RC_GROUP];
        RC_UNROLL
        for (int b = 0; b < RC_GROUP; b++) k[b] = ki[b * K + i];
#pragma omp simd
        for (int j = 0; j < bv; j++) {
            float x = row[j];
            RC_UNROLL
            for (int b = 0; b < RC_GROUP; b++) x += k[b] * u[b][j];
            row[j] = x;
        }
    }
}

/* Columns [c0, c0 + cw) of one sweep that applies a group's updates and projects the
 * next group: row = (row + sum_b ki_b u[b]) (times sc when `scaled`), then acc[b] +=
 * row kc_b and out[b] += row qc_b for the next group's keys and queries. The two sweeps'
 * multiply-adds in one: a row is loaded and stored once for both groups. */
static inline __attribute__((always_inline)) void
update_project_columns(float *restrict S, int64_t K, const float *restrict ki,
                       float u[RC_GROUP][RC_BV], const float *restrict kc,
                       const float *restrict qc, const float *restrict sc, const int scaled,
                       const int c0, const int cw, float acc[RC_GROUP][RC_BV],
                       float out[RC_GROUP][RC_BV])
{
    float a[RC_GROUP][RC_GW], o[RC_GROUP][RC_GW], us[RC_GROUP][RC_GW];
    for (int b = 0; b < RC_GROUP; b++)
        for (int j = 0; j < cw; j++) { a[b][j] = 0.0f; o[b][j] = 0.0f; us[b][j] = u[b][c0 + j]; }
    for (int64_t i = 0; i < K; i++) {
        float *restrict row = S + i * RC_BV + c0;
        float k[RC_GROUP], kn[RC_GROUP], qn[RC_GROUP];
        RC_UNROLL
        for (int b = 0; b < RC_GROUP; b++) {
            k[b] = ki[b * K + i];
            kn[b] = kc[b * K + i];
            qn[b] = qc[b * K + i];
        }
        const float d = scaled ? sc[i] : 1.0f;
#pragma omp simd
        for (int j = 0; j < cw; j++) {
            float x = row[j];
            RC_UNROLL
            for (int b = 0; b < RC_GROUP; b++) x = __builtin_fmaf(k[b], us[b][j], x);
            if (scaled) x *= d;
            row[j] = x;
            RC_UNROLL
            for (int b = 0; b < RC_GROUP; b++) { a[b][j] += x * kn[b]; o[b][j] += x * qn[b]; }
        }
    }
    for (int b = 0; b < RC_GROUP; b++)
        for (int j = 0; j < cw; j++) { acc[b][c0 + j] = a[b][j]; out[b][c0 + j] = o[b][j]; }
}

#if defined(__AVX512F__)
#include <immintrin.h>
/* update_project_columns for groups of 4 over 32 columns, written with AVX-512
 * intrinsics: the 16 partial sums, the row and the 12 broadcast weights take 30 of the 32
 * vector registers, and the updates' values are read from the cache as operands. Left to
 * the vectoriser, the values took registers and the weights were spilled (a store each:
 * slower than two sweeps). */
static inline __attribute__((always_inline)) void
update_project_4x32(float *restrict S, int64_t K, const float *restrict ki,
                    float u[RC_GROUP][RC_BV], const float *restrict kc,
                    const float *restrict qc, const float *restrict sc, const int scaled,
                    const int c0, float acc[RC_GROUP][RC_BV], float out[RC_GROUP][RC_BV])
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
           a7 = a0, o0 = a0, o1 = a0, o2 = a0, o3 = a0, o4 = a0, o5 = a0, o6 = a0, o7 = a0;
    const float *u0 = u[0] + c0, *u1 = u[1] + c0, *u2 = u[2] + c0, *u3 = u[3] + c0;
    for (int64_t i = 0; i < K; i++) {
        float *row = S + i * RC_BV + c0;
        __m512 x = _mm512_loadu_ps(row), y = _mm512_loadu_ps(row + 16);
        const __m512 k0 = _mm512_set1_ps(ki[i]), k1 = _mm512_set1_ps(ki[K + i]),
                     k2 = _mm512_set1_ps(ki[2 * K + i]), k3 = _mm512_set1_ps(ki[3 * K + i]);
        x = _mm512_fmadd_ps(k0, _mm512_loadu_ps(u0), x);
        y = _mm512_fmadd_ps(k0, _mm512_loadu_ps(u0 + 16), y);
        x = _mm512_fmadd_ps(k1, _mm512_loadu_ps(u1), x);
        y = _mm512_fmadd_ps(k1, _mm512_loadu_ps(u1 + 16), y);
        x = _mm512_fmadd_ps(k2, _mm512_loadu_ps(u2), x);
        y = _mm512_fmadd_ps(k2, _mm512_loadu_ps(u2 + 16), y);
        x = _mm512_fmadd_ps(k3, _mm512_loadu_ps(u3), x);
        y = _mm512_fmadd_ps(k3, _mm512_loadu_ps(u3 + 16), y);
        if (scaled) {
            const __m512 d = _mm512_set1_ps(sc[i]);
            x = _mm512_mul_ps(x, d);
            y = _mm512_mul_ps(y, d);
        }
        _mm512_storeu_ps(row, x);
        _mm512_storeu_ps(row + 16, y);
        __m512 w = _mm512_set1_ps(kc[i]);
        a0 = _mm512_fmadd_ps(x, w, a0); a1 = _mm512_fmadd_ps(y, w, a1);
        w = _mm512_set1_ps(qc[i]);
        o0 = _mm512_fmadd_ps(x, w, o0); o1 = _mm512_fmadd_ps(y, w, o1);
        w = _mm512_set1_ps(kc[K + i]);
        a2 = _mm512_fmadd_ps(x, w, a2); a3 = _mm512_fmadd_ps(y, w, a3);
        w = _mm512_set1_ps(qc[K + i]);
        o2 = _mm512_fmadd_ps(x, w, o2); o3 = _mm512_fmadd_ps(y, w, o3);
        w = _mm512_set1_ps(kc[2 * K + i]);
        a4 = _mm512_fmadd_ps(x, w, a4); a5 = _mm512_fmadd_ps(y, w, a5);
        w = _mm512_set1_ps(qc[2 * K + i]);
        o4 = _mm512_fmadd_ps(x, w, o4); o5 = _mm512_fmadd_ps(y, w, o5);
        w = _mm512_set1_ps(kc[3 * K + i]);
        a6 = _mm512_fmadd_ps(x, w, a6); a7 = _mm512_fmadd_ps(y, w, a7);
        w = _mm512_set1_ps(qc[3 * K + i]);
        o6 = _mm512_fmadd_ps(x, w, o6); o7 = _mm512_fmadd_ps(y, w, o7);
    }
    _mm512_storeu_ps(acc[0] + c0, a0); _mm512_storeu_ps(acc[0] + c0 + 16, a1);
    _mm512_storeu_ps(acc[1] + c0, a2); _mm512_storeu_ps(acc[1] + c0 + 16, a3);
    _mm512_storeu_ps(acc[2] + c0, a4); _mm512_storeu_ps(acc[2] + c0 + 16, a5);
    _mm512_storeu_ps(acc[3] + c0, a6); _mm512_storeu_ps(acc[3] + c0 + 16, a7);
    _mm512_storeu_ps(out[0] + c0, o0); _mm512_storeu_ps(out[0] + c0 + 16, o1);
    _mm512_storeu_ps(out[1] + c0, o2); _mm512_storeu_ps(out[1] + c0 + 16, o3);
    _mm512_storeu_ps(out[2] + c0, o4); _mm512_storeu_ps(out[2] + c0 + 16, o5);
    _mm512_storeu_ps(out[3] + c0, o6); _mm512_storeu_ps(out[3] + c0 + 16, o7);
}
#define RC_FUSED_4X32 (RC_GROUP == 4 && RC_GW == 32)
#else
#define RC_FUSED_4X32 0
#endif

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include <immintrin.h>
/* update_project_columns for groups of 2 over 16 columns (the defaults with 16 vector
 * registers), written with AVX2 intrinsics: the 8 partial sums, the row's two vectors
 * and one broadcast weight at a time take 11 of the 16 registers, the updates' values
 * are read from the cache as operands. 1.03-1.07x over the vectoriser's loop at the
 * prefill shapes on a 2-core Zen 3. */
static inline __attribute__((always_inline)) void
update_project_2x16(float *restrict S, int64_t K, const float *restrict ki,
                    float u[RC_GROUP][RC_BV], const float *restrict kc,
                    const float *restrict qc, const float *restrict sc, const int scaled,
                    const int c0, float acc[RC_GROUP][RC_BV], float out[RC_GROUP][RC_BV])
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, o0 = a0, o1 = a0, o2 = a0,
           o3 = a0;
    const float *u0 = u[0] + c0, *u1 = u[1] + c0;
    for (int64_t i = 0; i < K; i++) {
        float *row = S + i * RC_BV + c0;
        __m256 x = _mm256_loadu_ps(row), y = _mm256_loadu_ps(row + 8);
        __m256 w = _mm256_broadcast_ss(ki + i);
        x = _mm256_fmadd_ps(w, _mm256_loadu_ps(u0), x);
        y = _mm256_fmadd_ps(w, _mm256_loadu_ps(u0 + 8), y);
        w = _mm256_broadcast_ss(ki + K + i);
        x = _mm256_fmadd_ps(w, _mm256_loadu_ps(u1), x);
        y = _mm256_fmadd_ps(w, _mm256_loadu_ps(u1 + 8), y);
        if (scaled) {
            w = _mm256_broadcast_ss(sc + i);
            x = _mm256_mul_ps(x, w);
            y = _mm256_mul_ps(y, w);
        }
        _mm256_storeu_ps(row, x);
        _mm256_storeu_ps(row + 8, y);
        w = _mm256_broadcast_ss(kc + i);
        a0 = _mm256_fmadd_ps(x, w, a0); a1 = _mm256_fmadd_ps(y, w, a1);
        w = _mm256_broadcast_ss(qc + i);
        o0 = _mm256_fmadd_ps(x, w, o0); o1 = _mm256_fmadd_ps(y, w, o1);
        w = _mm256_broadcast_ss(kc + K + i);
        a2 = _mm256_fmadd_ps(x, w, a2); a3 = _mm256_fmadd_ps(y, w, a3);
        w = _mm256_broadcast_ss(qc + K + i);
        o2 = _mm256_fmadd_ps(x, w, o2); o3 = _mm256_fmadd_ps(y, w, o3);
    }
    _mm256_storeu_ps(acc[0] + c0, a0); _mm256_storeu_ps(acc[0] + c0 + 8, a1);
    _mm256_storeu_ps(acc[1] + c0, a2); _mm256_storeu_ps(acc[1] + c0 + 8, a3);
    _mm256_storeu_ps(out[0] + c0, o0); _mm256_storeu_ps(out[0] + c0 + 8, o1);
    _mm256_storeu_ps(out[1] + c0, o2); _mm256_storeu_ps(out[1] + c0 + 8, o3);
}
#define RC_FUSED_2X16 (RC_GROUP == 2 && RC_GW == 16)
#else
#define RC_FUSED_2X16 0
#endif

/* The update of the group at g and the projection of the group at `next` in one sweep
 * (RC_PASSES 1), RC_GW columns at a time as group_project. */
static inline __attribute__((always_inline)) void
group_update_project(float *restrict S, int64_t K, const int bv, const rc_work *w, int g,
                     float u[RC_GROUP][RC_BV], int next, float acc[RC_GROUP][RC_BV],
                     float out[RC_GROUP][RC_BV])
{
    const float *restrict ki = w->KI + g * K, *restrict sc = w->SC + next * K;
    const float *restrict kc = w->KC + next * K, *restrict qc = w->QC + next * K;
    for (int c0 = 0; c0 < bv; c0 += RC_GW) {
        const int cw = bv - c0 < RC_GW ? bv - c0 : RC_GW;
#if RC_FUSED_4X32
        if (cw == RC_GW) {
            update_project_4x32(S, K, ki, u, kc, qc, sc, w->scaled[next], c0, acc, out);
            continue;
        }
#endif
#if RC_FUSED_2X16
        if (cw == RC_GW) {
            update_project_2x16(S, K, ki, u, kc, qc, sc, w->scaled[next], c0, acc, out);
            continue;
        }
#endif
        if (cw == RC_GW && w->scaled[next])  /* whole slices: constant trip counts */
            update_project_columns(S, K, ki, u, kc, qc, sc, 1, c0, RC_GW, acc, out);
        else if (cw == RC_GW)
            update_project_columns(S, K, ki, u, kc, qc, sc, 0, c0, RC_GW, acc, out);
        else
            update_project_columns(S, K, ki, u, kc, qc, sc, w->scaled[next], c0, cw, acc, out);
    }
}

/* Whether the group from block index g renormalises after its first token (it then runs
 * token by token). */
static inline int group_renormalises(const rc_work *w, int g)
{
    int renormalises = 0;
    for (int m = 1; m < RC_GROUP; m++) renormalises |= w->scaled[g + m];
    return renormalises;
}

/* Tokens g .. g+RC_GROUP-1 of a block (n tokens) over one tile (nv of its columns
 * valid): project (unless the previous group's sweep did: `projected`), solve, output,
 * update. With RC_PASSES 1 the update sweep also projects the next group where that
 * group runs whole; returns whether it did. acc, out and u are the caller's, so a
 * projection outlives its group. */
static inline __attribute__((always_inline)) int
run_group(const delta_args *a, rc_work *w, float *restrict S, int64_t b, int64_t hv,
          int64_t t0, int g, int n, int64_t v0, const int bv, int nv, rc_share ahead,
          int projected, float acc[RC_GROUP][RC_BV], float out[RC_GROUP][RC_BV],
          float u[RC_GROUP][RC_BV])
{
    const int64_t K = a->K, V = a->V;
    float pad[RC_BV];
    for (int m = 0; m < RC_GROUP; m++) before_token(a, b, hv, t0 + g + m, v0, nv, ahead);
    if (!projected) group_project(S, K, bv, w, g, acc, out);
    RC_UNROLL  /* constant indices: the group's vectors can live in registers */
    for (int m = 0; m < RC_GROUP; m++) {
        const int s = g + m;
        const int64_t tok = (b * a->T + t0 + s) * a->HV + hv;
        const float *restrict vt = tile_values(a->v + tok * V + v0, nv, pad);
        const float *dk = w->DK + s * RC_GROUP, *dq = w->DQ + s * RC_GROUP;
        for (int j = 0; j < bv; j++) {
            float x = acc[m][j];  /* S^T kc_s with the group's earlier updates added */
            RC_UNROLL
            for (int c = 0; c < m; c++) x += dk[c] * u[c][j];
            u[m][j] = w->beta[s] * (vt[j] - x);
        }
        for (int j = 0; j < bv; j++) {
            float y = out[m][j];
            RC_UNROLL
            for (int c = 0; c <= m; c++) y += dq[c] * u[c][j];
            out[m][j] = y;
        }
        store_outputs(a->o + tok * V + v0, out[m], nv);
    }
    const int next = g + RC_GROUP;
    if (RC_PASSES == 1 && next + RC_GROUP <= n && !group_renormalises(w, next)) {
        group_update_project(S, K, bv, w, g, u, next, acc, out);
        return 1;
    }
    group_update(S, K, bv, w->KI + g * K, u);
    return 0;
}
#endif

/* Token s of a block in two sweeps: S^T k (after the decay, if any), then the update
 * with the readout into out. */
static inline __attribute__((always_inline)) void
token_fused(rc_work *w, float *restrict S, int64_t K, const int bv, int s,
            const float *restrict vt, float *restrict out)
{
    float u[RC_BV];
    sweep_project(S, K, bv, w->SC + s * K, w->scaled[s], w->KC + s * K, w->acc);
    for (int j = 0; j < bv; j++) u[j] = w->beta[s] * (vt[j] - w->acc[j]);
    sweep_update(S, K, bv, SWEEP_LAST, w->KI + s * K, u, w->QC + s * K, out, NULL, NULL, NULL);
}

/* Run n prepared tokens over one key-major tile (RC_BV value columns from v0, nv of
 * them valid: tile_values); ahead: the share of the next block's inputs it asks for. */
static inline __attribute__((always_inline)) void
run_block(const delta_args *a, rc_work *w, float *restrict S, int64_t b, int64_t hv,
          int64_t t0, int n, int64_t v0, int nv, rc_share ahead)
{
    const int64_t K = a->K, V = a->V;
    const int bv = RC_BV;
    float out[RC_BV], pad[RC_BV];
    int s = 0;
#if RC_GROUP
    float gacc[RC_GROUP][RC_BV], gout[RC_GROUP][RC_BV], gu[RC_GROUP][RC_BV];
    int projected = 0;  /* the previous group's sweep projected this one */
    for (; s + RC_GROUP <= n; s += RC_GROUP) {
        if (!group_renormalises(w, s)) {  /* else token by token */
            projected = run_group(a, w, S, b, hv, t0, s, n, v0, bv, nv, ahead, projected,
                                  gacc, gout, gu);
            continue;
        }
        for (int m = s; m < s + RC_GROUP; m++) {
            const int64_t tok = (b * a->T + t0 + m) * a->HV + hv;
            before_token(a, b, hv, t0 + m, v0, nv, ahead);
            token_fused(w, S, K, bv, m, tile_values(a->v + tok * V + v0, nv, pad), out);
            store_outputs(a->o + tok * V + v0, out, nv);
        }
    }
#endif
#if RC_PASSES == 1
    float u[RC_BV], *restrict acc = w->acc;
    if (s < n) sweep_project(S, K, bv, w->SC + s * K, w->scaled[s], w->KC + s * K, acc);
#endif
    for (; s < n; s++) {
        const int64_t tok = (b * a->T + t0 + s) * a->HV + hv;
        const float *restrict vt = tile_values(a->v + tok * V + v0, nv, pad);
        before_token(a, b, hv, t0 + s, v0, nv, ahead);
#if RC_PASSES == 4
        token_separate(S, K, bv, w->SC + s * K, w->scaled[s], w->KC + s * K, w->KI + s * K,
                       w->QC + s * K, vt, w->beta[s], out);
#elif RC_PASSES == 2
        token_fused(w, S, K, bv, s, vt, out);
#else
        const float *qc = w->QC + s * K, *kc = w->KC + s * K, *ki = w->KI + s * K;
        const float *sc = w->SC + s * K;
        for (int j = 0; j < bv; j++) u[j] = w->beta[s] * (vt[j] - acc[j]);
        if (s + 1 == n)
            sweep_update(S, K, bv, SWEEP_LAST, ki, u, qc, out, sc, kc, acc);
        else if (w->scaled[s + 1])
            sweep_update(S, K, bv, SWEEP_SCALED_NEXT, ki, u, qc, out, sc + K, kc + K, acc);
        else
            sweep_update(S, K, bv, SWEEP_NEXT, ki, u, qc, out, sc + K, kc + K, acc);
#endif
        store_outputs(a->o + tok * V + v0, out, nv);
    }
}
#else
/* Value-major tile: row j is column j of the state (K keys), so every product is a dot
 * product over one row. RC_PASSES 4 runs as 2 here: a row is swept whole either way. */
static inline __attribute__((always_inline)) float
row_project(float *restrict row, int64_t K, const float *restrict sc, int scaled,
            const float *restrict kc)
{
    float acc = 0.0f;
    if (scaled) {
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < K; i++) { row[i] *= sc[i]; acc += row[i] * kc[i]; }
    } else {
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < K; i++) acc += row[i] * kc[i];
    }
    return acc;
}

static inline __attribute__((always_inline)) void
run_block(const delta_args *a, rc_work *w, float *restrict S, int64_t b, int64_t hv,
          int64_t t0, int n, int64_t v0, const int bv, rc_share ahead)
{
    const int64_t K = a->K, V = a->V;
    float *restrict acc = w->acc;
#if RC_PASSES == 1
    for (int j = 0; j < bv; j++) acc[j] = row_project(S + j * K, K, w->SC, w->scaled[0], w->KC);
#endif
    for (int s = 0; s < n; s++) {
        const int64_t tok = (b * a->T + t0 + s) * a->HV + hv;
        const float *restrict vt = a->v + tok * V + v0;
        float *restrict ot = a->o + tok * V + v0;
        const float *restrict qc = w->QC + s * K, *restrict ki = w->KI + s * K;
        before_token(a, b, hv, t0 + s, v0, bv, ahead);
        const int next = RC_PASSES == 1 && s + 1 < n, scaled_next = next && w->scaled[s + 1];
        for (int j = 0; j < bv; j++) {
            float *restrict row = S + j * K;
            if (RC_PASSES != 1) acc[j] = row_project(row, K, w->SC + s * K, w->scaled[s], w->KC + s * K);
            const float u = w->beta[s] * (vt[j] - acc[j]);
            float out = 0.0f;
#pragma omp simd reduction(+ : out)
            for (int64_t i = 0; i < K; i++) { row[i] += ki[i] * u; out += row[i] * qc[i]; }
            ot[j] = out;
            if (next)
                acc[j] = row_project(row, K, w->SC + (s + 1) * K, scaled_next, w->KC + (s + 1) * K);
        }
    }
}
#endif

/* Value heads hv0 .. hv0 + heads - 1 of batch b over the whole sequence, for tiles [tile0,
 * tile1), block after block, each block head after head (RC_HEADS). next: the first value
 * head of the job this thread likely runs next (RC_STATE_AHEAD), or -1. */
static void run_job(const delta_args *a, rc_work *w, int64_t b, int64_t hv0, int heads,
                    int64_t tile0, int64_t tile1, int64_t next)
{
    const int64_t K = a->K, V = a->V, T = a->T, span = (tile1 - tile0) * K * RC_BV;
    for (int x = 0; x < heads; x++) {
        const float *h0 = a->h0 ? a->h0 + delta_state(a, b, hv0 + x) : NULL;
        for (int64_t d = 0; d < K; d++) w->logs[x * K + d] = 0.0f;
        /* rows outermost: the initial and final states are read and written in address
         * order (decode moves little else) */
        for (int64_t i = 0; i < K; i++)
            for (int64_t tile = tile0; tile < tile1; tile++) {
                float *S = w->S + x * span + (tile - tile0) * K * RC_BV;
                const int64_t v0 = tile * RC_BV;
                const int bv = (int)(V - v0 < RC_BV ? V - v0 : RC_BV);
                for (int j = 0; j < bv; j++) RC_AT(S, i, j, K) = h0 ? h0[i * V + v0 + j] : 0.0f;
                if (!RC_VMAJOR)  /* a partial tile's padding columns (tile_values) */
                    for (int j = bv; j < RC_BV; j++) RC_AT(S, i, j, K) = 0.0f;
            }
    }
    for (int64_t t0 = 0; t0 < T; t0 += RC_NB) {
        const int n = (int)(T - t0 < RC_NB ? T - t0 : RC_NB);
        for (int x = 0; x < heads; x++) {
            const int64_t hv = hv0 + x;
            w->L = w->logs + x * K;
            prepare(a, w, b, hv, t0, n);
            for (int64_t tile = tile0; tile < tile1; tile++) {
                float *S = w->S + x * span + (tile - tile0) * K * RC_BV;
                const int64_t v0 = tile * RC_BV;
                const int nv = (int)(V - v0 < RC_BV ? V - v0 : RC_BV);
                const rc_share ahead = tile_share(K, tile - tile0, tile1 - tile0);
#if RC_VMAJOR
                if (nv == RC_BV)  /* full tile: constant trip counts, fully vectorised */
                    run_block(a, w, S, b, hv, t0, n, v0, RC_BV, ahead);
                else
                    run_block(a, w, S, b, hv, t0, n, v0, nv, ahead);
#else
                run_block(a, w, S, b, hv, t0, n, v0, nv, ahead);  /* padded: tile_values */
#endif
            }
        }
    }
#if RC_STREAM && defined(__AVX__)
    _mm_sfence();  /* streamed outputs are in memory before the job is reported done */
#endif
    if (!a->ht) return;
    for (int x = 0; x < heads; x++) {
        float *ht = a->ht + delta_state(a, b, hv0 + x);
        const float *ahead = NULL;  /* the next job's state of the same rank */
        if (RC_STATE_AHEAD && next >= 0 && a->h0)
            ahead = a->h0 + delta_state(a, (next + x) / a->HV, (next + x) % a->HV);
        float *c = w->logs + x * K;
        for (int64_t d = 0; d < K; d++) c[d] = RC_DEFERRED ? delta_exp(c[d]) : 1.0f;
        for (int64_t i = 0; i < K; i++) {
            if (ahead) prefetch_lines(ahead + i * V, V);
            for (int64_t tile = tile0; tile < tile1; tile++) {
                const float *S = w->S + x * span + (tile - tile0) * K * RC_BV;
                const int64_t v0 = tile * RC_BV;
                const int bv = (int)(V - v0 < RC_BV ? V - v0 : RC_BV);
                for (int j = 0; j < bv; j++) ht[i * V + v0 + j] = c[i] * RC_AT(S, i, j, K);
            }
        }
    }
}

static float *take(float **cursor, size_t count)
{
    float *block = *cursor;
    *cursor += (count + 15) / 16 * 16;  /* every block 64-byte aligned */
    return block;
}

static void *work_alloc(rc_work *w, int64_t K, int64_t tiles, int heads)
{
    const size_t nk = (size_t)RC_NB * K, state = (size_t)heads * tiles * K * RC_BV;
    const size_t groups = (size_t)RC_NB * RC_GROUP_SLOTS;
    const size_t total = 4 * (nk + 16) + 3 * (RC_NB + 16) + (heads * K + 16) + (RC_BV + 16)
                       + state + 2 * (groups + 16);
    float *base = aligned_alloc(64, (total * sizeof(float) + 63) / 64 * 64);
    if (!base) return NULL;
    float *cursor = base;
    w->QC = take(&cursor, nk); w->KC = take(&cursor, nk);
    w->KI = take(&cursor, nk); w->SC = take(&cursor, nk);
    w->beta = take(&cursor, RC_NB); w->logs = w->L = take(&cursor, (size_t)heads * K);
    w->acc = take(&cursor, RC_BV);
    w->scaled = (unsigned char *)take(&cursor, 2 * RC_NB);
    w->DK = take(&cursor, groups); w->DQ = take(&cursor, groups);
    w->S = take(&cursor, state);
    return base;
}

#if RC_DECODE_DIRECT
/* Columns of a decode sweep: its two rows of partial sums fill half the vector registers
 * (128 with AVX-512, 32 with AVX2); a narrower state runs whole. */
#define RC_DW (RC_VREGS * RC_VFLOATS / 4)

/* The next job's state, asked for while a decode job sweeps its own (RC_STATE_AHEAD):
 * in address order, an equal share of its lines per row of every sweep, so the requests
 * keep pace with the job from its first row to its last. Asked for as the sweeps read
 * their own state instead (a slice of each row, rows V floats apart, in both sweeps),
 * B64 and B256 decode ran 1.06-1.21x slower on a 2-core Zen 3 (AVX2); every second
 * line alone, 1.12-1.27x slower; each line twice, 1.03-1.10x slower. */
typedef struct {
    const float *state;  /* the next job's state, or NULL */
    int64_t size;        /* its floats */
    int64_t asked;       /* floats asked for (whole lines) */
    int64_t due;         /* floats to have asked for by now */
    int64_t per_row;     /* floats due per row swept */
} rc_ahead_state;

static inline __attribute__((always_inline)) void ask_row(rc_ahead_state *n)
{
    if (!RC_STATE_AHEAD || !n->state) return;
    n->due += n->per_row;
    const int64_t to = n->due < n->size ? n->due : n->size;
    if (n->asked >= to) return;
    prefetch_lines(n->state + n->asked, to - n->asked);
    n->asked += (to - n->asked + 15) / 16 * 16;
}

/* Decode, columns [c0, c0 + w) of one state (columns evolve independently). in: the
 * initial state (NULL: zeros); out: the final state (NULL: not kept), which may be in.
 * d, kd, qd: the token's decays, k d and scale q d per key channel; qk: scale q . k;
 * ahead: the next job's state, asked for row by row. */
static inline __attribute__((always_inline)) void
decode_columns(const float *in, float *out, int64_t K, int64_t V, int64_t c0, const int w,
               const float *restrict d, const float *restrict k, const float *restrict kd,
               const float *restrict qd, float qk, float beta, const float *restrict vt,
               float *restrict ot, rc_ahead_state *ahead)
{
    float acc[RC_DW], qs[RC_DW], u[RC_DW];
    for (int j = 0; j < w; j++) acc[j] = qs[j] = 0.0f;
    if (in)
        for (int64_t i = 0; i < K; i++) {
            const float *restrict row = in + i * V + c0;
            const float kw = kd[i], qw = qd[i];
            ask_row(ahead);
#pragma omp simd
            for (int j = 0; j < w; j++) { acc[j] += kw * row[j]; qs[j] += qw * row[j]; }
        }
    for (int j = 0; j < w; j++) {
        u[j] = beta * (vt[c0 + j] - acc[j]);
        ot[c0 + j] = qs[j] + qk * u[j];  /* scale q^T (d S + k u^T) */
    }
    if (!out) return;
    for (int64_t i = 0; i < K; i++) {
        /* not restrict: out may be in, element for element */
        const float *row = in ? in + i * V + c0 : NULL;
        float *dst = out + i * V + c0;
        const float di = d[i], ki = k[i];
        ask_row(ahead);
        if (row) {
#pragma omp simd
            for (int j = 0; j < w; j++) dst[j] = di * row[j] + ki * u[j];
        } else {
#pragma omp simd
            for (int j = 0; j < w; j++) dst[j] = ki * u[j];
        }
    }
}

/* Decode of sequence b, value head hv: its token's weights, then its state column slice
 * by column slice; scratch: 3 K floats. */
static void decode_job(const delta_args *a, int64_t b, int64_t hv, float *restrict scratch,
                       const float *next)
{
    const int64_t K = a->K, V = a->V, h = hv / (a->HV / a->H), tok = b * a->HV + hv;
    const float *restrict q = a->q + (b * a->H + h) * K, *restrict k = a->k + (b * a->H + h) * K;
    float *restrict d = scratch, *restrict kd = scratch + K, *restrict qd = scratch + 2 * K;
    /* the gate through a local restrict pointer: read through `a`, the loop ran scalar
     * (2-core Zen 3: B8 decode 1.11-1.13x slower, B256 1.05-1.12x, B64 1.02-1.10x in six
     * pairs of seven) */
    const float *restrict gt = a->g + tok * (DELTA_SCALAR_GATE ? 1 : K);
    const float scale = a->scale;
    float qk = 0.0f;
#pragma omp simd reduction(+ : qk)
    for (int64_t i = 0; i < K; i++) {
        const float di = delta_exp(gt[DELTA_SCALAR_GATE ? 0 : i]);
        d[i] = di;
        kd[i] = k[i] * di;
        qd[i] = scale * q[i] * di;
        qk += q[i] * k[i];
    }
    qk *= scale;
    const int64_t state = delta_state(a, b, hv);
    const float *in = a->h0 ? a->h0 + state : NULL;
    float *out = a->ht ? a->ht + state : NULL;
    const float *vt = a->v + tok * V, beta = a->beta[tok];
    float *ot = a->o + tok * V;
    const int64_t sweeps = (V + RC_DW - 1) / RC_DW * ((in != NULL) + (out != NULL));
    rc_ahead_state ahead = { next, K * V, 0, 0, sweeps ? (V + sweeps - 1) / sweeps : 0 };
    for (int64_t c0 = 0; c0 < V; c0 += RC_DW)
        if (V - c0 >= RC_DW)  /* a whole slice: constant trip counts */
            decode_columns(in, out, K, V, c0, RC_DW, d, k, kd, qd, qk, beta, vt, ot, &ahead);
        else
            decode_columns(in, out, K, V, c0, (int)(V - c0), d, k, kd, qd, qk, beta, vt, ot,
                           &ahead);
}

static int decode_run(const delta_args *a)
{
    const int64_t HV = a->HV, jobs = a->B * HV, K = a->K;
    int failed = 0;
#pragma omp parallel num_threads(RC_PARALLEL ? RC_THREADS : 1) reduction(| : failed)
    {
        float *scratch = aligned_alloc(64, ((size_t)3 * K * sizeof(float) + 63) / 64 * 64);
        if (!scratch) failed = 1;
#pragma omp for schedule(RC_SCHEDULE)
        for (int64_t job = 0; job < jobs; job++) {
            if (!scratch) continue;
            const float *next = NULL;
            if (RC_STATE_AHEAD && a->h0 && job + 1 < jobs)
                next = a->h0 + delta_state(a, (job + 1) / HV, (job + 1) % HV);
            decode_job(a, job / HV, job % HV, scratch, next);
        }
        free(scratch);
    }
    return failed ? 2 : 0;
}
#endif

/* Heads per job (RC_HEADS): the most, up to RC_HEADS, that divide HV, keep their states
 * within RC_HEADS_BYTES and give no thread more heads than one head per job would. */
static int job_heads(const delta_args *a, int threads)
{
    const int64_t heads = a->B * a->HV, most = (heads + threads - 1) / threads;
    int m = RC_HEADS;
    while (m > 1 && (a->HV % m || (int64_t)m * a->K * a->V * 4 > RC_HEADS_BYTES
                     || (heads / m + threads - 1) / threads * m > most))
        m--;
    return m;
}

static int delta_run(const delta_args *a)
{
    const int64_t B = a->B, HV = a->HV, K = a->K, V = a->V;
    const int threads = RC_PARALLEL ? RC_THREADS : 1;
    advise_outputs(a, threads);
#if RC_DECODE_DIRECT
    if (a->T == 1) return decode_run(a);
#endif
    const int64_t tiles = (V + RC_BV - 1) / RC_BV;
    const int64_t per_job = RC_PARALLEL == 2 ? 1 : tiles;
    const int heads = per_job == tiles ? job_heads(a, threads) : 1;
    const int64_t units = B * HV / heads, jobs = units * (tiles / per_job);
    int failed = 0;
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        rc_work w;
        void *base = work_alloc(&w, K, per_job, heads);
        if (!base) failed = 1;
#pragma omp for schedule(RC_SCHEDULE)
        for (int64_t job = 0; job < jobs; job++) {
            if (!base) continue;
            const int64_t first = job / (tiles / per_job) * heads;  /* over B x HV */
            const int64_t tile0 = job % (tiles / per_job) * per_job;
            /* a job owning whole heads: the next one's states are the next heads' */
            const int64_t next = per_job == tiles && job + 1 < jobs ? first + heads : -1;
            run_job(a, &w, first / HV, first % HV, heads, tile0, tile0 + per_job, next);
        }
        free(base);
    }
    return failed ? 2 : 0;
}
