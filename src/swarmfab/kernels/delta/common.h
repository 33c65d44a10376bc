/*
 * Shared by the gated delta rule's C templates; the design space puts it in front of a
 * template's source, after the knob #defines, so a candidate stays one file.
 *   DELTA_SCALAR_GATE  0: g is [B,T,HV,K] (KDA); 1: g is [B,T,HV] (GDN)
 *   DELTA_SYMBOL       exported entry point (kda_forward, gdn_forward); its pooled form
 *                      DELTA_SYMBOL_indexed is exported too (see the end of this file)
 *   DELTA_OUTPUT_PAGES 0: outputs fault their pages in as they are written; 1: 2 MB pages
 *                      behind them (madvise) first; 2: every page mapped first, by the
 *                      call's threads, one madvise per 2 MB (no fault per page)
 *   DELTA_RETAIN_FREED_MEMORY 1: glibc's malloc keeps freed memory (process-wide, below)
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef DELTA_SCALAR_GATE
#define DELTA_SCALAR_GATE 0
#endif
#ifndef DELTA_SYMBOL
#define DELTA_SYMBOL kda_forward
#endif
#ifndef DELTA_OUTPUT_PAGES
#define DELTA_OUTPUT_PAGES 0
#endif

typedef struct {
    const float *q, *k, *v, *g, *beta, *h0;
    float *o, *ht;
    float scale;
    int64_t B, T, H, HV, K, V;
    const int64_t *slot;  /* sequence b's state is slot[b] of h0 and ht; NULL: slot b */
    int64_t slots;        /* states in h0 and ht */
} delta_args;

/* Where sequence b's state lives in h0 and ht. A template reads a state tile whole
 * before it writes it back, so ht may be h0 (decode in place). */
static inline int64_t delta_slot(const delta_args *a, int64_t b)
{
    return a->slot ? a->slot[b] : b;
}

/* Where sequence b's state for value head hv starts in h0 and ht, in floats. */
static inline int64_t delta_state(const delta_args *a, int64_t b, int64_t hv)
{
    return (delta_slot(a, b) * a->HV + hv) * a->K * a->V;
}

/* Token tok's gate for key channel d (a scalar gate is the same for every channel). */
static inline float delta_gate(const delta_args *a, int64_t tok, int64_t d)
{
#if DELTA_SCALAR_GATE
    (void)d;
    return a->g[tok];
#else
    return a->g[tok * a->K + d];
#endif
}

/*
 * A log decay raised to DELTA_GATE_FLOOR (-30) where it lies below: exp(-30) ~ 1e-13 leaves
 * nothing of the state a float can hold, so the answer does not change, while a chunked
 * form's cumulative sums stay finite (an -inf gate, as masking writes, makes
 * exp(G_i - G_j) = exp(-inf + inf) = NaN) and small enough to keep their precision. On
 * the bits, as delta_exp clamps: -ffast-math may assume no infinities.
 */
static inline __attribute__((always_inline)) float delta_floor_gate(float x)
{
    union { float f; int32_t i; } in = { .f = x };
    const int32_t floor_bits = (int32_t)0xC1F00000u;  /* -30.0f */
    const int32_t below = -((in.i < 0) & (in.i > floor_bits));  /* all ones where below */
    in.i ^= (in.i ^ floor_bits) & below;
    return in.f;
}

/*
 * exp(x) for float, branch-free so loops over it vectorise (checked with -fopt-info-vec)
 * with any -march and without -ffast-math (libm's expf is a scalar call there).
 * x = n ln 2 + r with n the integer nearest x / ln 2, so |r| <= ln 2 / 2 (Cody-Waite: ln 2
 * in two parts), and Cephes' degree-6 polynomial for exp(r): about 1 ulp.
 * delta_exp_in_range takes -87.3 <= x <= 88 as it comes; delta_exp first raises arguments
 * below -87.3 to it (~1e-38). Callers keep arguments below 88.
 */
static inline __attribute__((always_inline)) float delta_exp_in_range(float x)
{
    const float y = x * 1.44269504088896341f;
#if defined(__SSE4_1__) || defined(__aarch64__)
    const float n = __builtin_rintf(y);  /* one instruction that vectorises */
#else
    const float t = (float)(int)(y + 0.5f);
    const float n = t - (y + 0.5f < t ? 1.0f : 0.0f);  /* floor(y + 0.5) */
#endif
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } scale = { .i = ((int32_t)n + 127) << 23 };
    return p * scale.f;
}

static inline __attribute__((always_inline)) float delta_exp(float x)
{
    /* clamp below at -87.3 on the bits, as a masked select (a conditional expression on
     * integers counts as control flow to the vectoriser): a negative float's bits grow
     * with its magnitude, -inf's and a negative NaN's included */
    union { float f; int32_t i; } in = { .f = x };
    const int32_t floor_bits = (int32_t)0xC2AE999Au;  /* -87.3f */
    const int32_t below = -((in.i < 0) & (in.i > floor_bits));  /* all ones where below */
    in.i ^= (in.i ^ floor_bits) & below;
    return delta_exp_in_range(in.f);
}

#if DELTA_RETAIN_FREED_MEMORY
#include <malloc.h>
/* PROCESS-WIDE, from the moment this library is loaded: glibc's malloc serves large
 * blocks from its heap instead of a fresh mmap each, and never gives freed memory back
 * to the system, so an output allocated on every call (fla's API, and every benchmark)
 * lands on pages already mapped: no page faults once warm. The process's resident
 * memory stays at its peak. glibc only (the design space offers it there). */
__attribute__((constructor)) static void delta_retain_freed_memory(void)
{
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 0x7fffffff);
}
#endif

#if DELTA_OUTPUT_PAGES
#include <sys/mman.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  /* Linux 5.14; older kernels refuse it, and pages fault */
#endif
#define DELTA_HUGE ((uintptr_t)1 << 21)

/* The whole pages inside an output buffer: [first, last). */
static inline void delta_interior(void *buffer, size_t bytes, uintptr_t page,
                                  uintptr_t *first, uintptr_t *last)
{
    *first = ((uintptr_t)buffer + page - 1) & ~(page - 1);
    *last = ((uintptr_t)buffer + bytes) & ~(page - 1);
}

/* 1: ask for 2 MB pages behind the 2 MB-aligned interior of an output buffer before it
 * is first written: a freshly allocated output (what fla's API and every benchmark hand
 * over) then takes 512x fewer page faults. A hint only: contents are untouched, and
 * pages already faulted in stay as they are.
 * 2: map every whole page of it first, the threads taking 2 MB each in turn: a fresh
 * 32 MiB output took 7 ms to fault in page by page on a 2-core Xeon VM and 3.9 ms in
 * one madvise (one thread), and a kernel faulting as it writes pays that inside its
 * loops, its threads contending for the page tables. Contents are untouched (a page
 * already mapped stays as it is). */
static void advise_buffer(void *buffer, size_t bytes, int threads)
{
    if (bytes < DELTA_HUGE) return;  /* malloc's heap: mapped once, then reused */
    uintptr_t first, last;
#if DELTA_OUTPUT_PAGES == 1
    (void)threads;
    delta_interior(buffer, bytes, DELTA_HUGE, &first, &last);
    if (last > first) (void)madvise((void *)first, last - first, MADV_HUGEPAGE);
#else
    const long page = sysconf(_SC_PAGESIZE);  /* 4 KiB here; 16 or 64 KiB on some ARM */
    delta_interior(buffer, bytes, page > 0 ? (uintptr_t)page : 4096, &first, &last);
    if (last <= first) return;
    const int64_t pieces = (int64_t)((last - first + DELTA_HUGE - 1) / DELTA_HUGE);
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int64_t i = 0; i < pieces; i++) {
        const uintptr_t from = first + (uintptr_t)i * DELTA_HUGE;
        const uintptr_t to = last - from < DELTA_HUGE ? last : from + DELTA_HUGE;
        (void)madvise((void *)from, to - from, MADV_POPULATE_WRITE);
    }
#endif
}

static void advise_outputs(const delta_args *a, int threads)
{
    advise_buffer(a->o, (size_t)(a->B * a->T * a->HV * a->V) * sizeof(float), threads);
    if (a->ht && a->ht != a->h0)  /* a pool updated in place is already paged in */
        advise_buffer(a->ht, (size_t)(a->slots * a->HV * a->K * a->V) * sizeof(float),
                      threads);
}
#else
static void advise_outputs(const delta_args *a, int threads) { (void)a; (void)threads; }
#endif

static int delta_shape_ok(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    return B >= 1 && T >= 1 && H >= 1 && HV >= 1 && K >= 1 && V >= 1 && HV % H == 0;
}

/* Slot indices are usable when each names a distinct state of the pool: two sequences
 * on one slot would race for it, and an index outside the pool writes out of bounds. */
static int delta_slots_ok(const int64_t *slot, int64_t B, int64_t slots)
{
    if (!slot) return slots >= B;
    unsigned char *taken = calloc((size_t)(slots > 0 ? slots : 1), 1);
    int ok = taken != NULL;
    for (int64_t b = 0; ok && b < B; b++) {
        ok = slot[b] >= 0 && slot[b] < slots && !taken[slot[b]];
        if (ok) taken[slot[b]] = 1;
    }
    free(taken);
    return ok;
}

/* The template's body: every (sequence, value head) of the call; 0, or 2 when out of
 * memory. */
static int delta_run(const delta_args *a);

#define DELTA_CONCAT_(a, b) a##b
#define DELTA_CONCAT(a, b) DELTA_CONCAT_(a, b)

/*
 * The pooled entry point, the way serving engines call the recurrence: h0 and ht hold
 * `slots` states [slots, HV, K, V]; sequence b starts from state state_indices[b] of h0
 * and its final state goes to the same slot of ht. ht may be h0 (decode in place: no
 * state is gathered, copied or allocated). state_indices NULL: sequence b uses slot b.
 * Returns 1 for a bad shape, 3 for indices that repeat or leave the pool, 2 when out of
 * memory; nothing is written then.
 */
int DELTA_CONCAT(DELTA_SYMBOL, _indexed)(
    const float *q, const float *k, const float *v, const float *g, const float *beta,
    const float *h0, float *o, float *ht, const int64_t *state_indices, int64_t slots,
    float scale, int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    if (!delta_shape_ok(B, T, H, HV, K, V)) return 1;
    if (!delta_slots_ok(state_indices, B, slots)) return 3;
    const delta_args a = {q, k, v, g, beta, h0, o, ht, scale, B, T, H, HV, K, V,
                          state_indices, slots};
    return delta_run(&a);
}

/* The plain entry point (fla's call): states [B, HV, K, V], sequence b in slot b. */
int DELTA_SYMBOL(const float *q, const float *k, const float *v, const float *g,
                 const float *beta, const float *h0, float *o, float *ht, float scale,
                 int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    return DELTA_CONCAT(DELTA_SYMBOL, _indexed)(q, k, v, g, beta, h0, o, ht, NULL, B,
                                                scale, B, T, H, HV, K, V);
}

/*
 * The packed entry point (fla's cu_seqlens, B = 1): sequence n holds tokens
 * cu_seqlens[n] .. cu_seqlens[n + 1] - 1 of q, k, v, g, beta and o; it starts from state
 * h0[n] (zero where h0 is NULL) and ends in ht[n] ([N, HV, K, V]; ht may be NULL). Each
 * sequence is the template's body on its own tokens, one after another, every thread on
 * each: one call from the caller where it would make N. Returns 1 for offsets that do
 * not run from 0 to T without decreasing, else what the body returns.
 */
int DELTA_CONCAT(DELTA_SYMBOL, _varlen)(
    const float *q, const float *k, const float *v, const float *g, const float *beta,
    const float *h0, float *o, float *ht, const int64_t *cu_seqlens, int64_t N,
    float scale, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    if (N < 1 || !cu_seqlens || !delta_shape_ok(1, T, H, HV, K, V)) return 1;
    if (cu_seqlens[0] != 0 || cu_seqlens[N] != T) return 1;
    for (int64_t n = 0; n < N; n++)
        if (cu_seqlens[n + 1] < cu_seqlens[n]) return 1;
#if DELTA_SCALAR_GATE
    const int64_t gate_row = HV;
#else
    const int64_t gate_row = HV * K;
#endif
    const int64_t state = HV * K * V;
    for (int64_t n = 0; n < N; n++) {
        const int64_t start = cu_seqlens[n], steps = cu_seqlens[n + 1] - start;
        if (steps == 0) {  /* an empty sequence: its state goes through unchanged */
            if (ht)
                for (int64_t i = 0; i < state; i++) ht[n * state + i] = h0 ? h0[n * state + i] : 0.0f;
            continue;
        }
        const delta_args a = {q + start * H * K, k + start * H * K, v + start * HV * V,
                              g + start * gate_row, beta + start * HV,
                              h0 ? h0 + n * state : NULL, o + start * HV * V,
                              ht ? ht + n * state : NULL, scale, 1, steps, H, HV, K, V,
                              NULL, 1};
        const int status = delta_run(&a);
        if (status != 0) return status;
    }
    return 0;
}
