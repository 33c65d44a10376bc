/*
 * Shared by the gated delta rule's C templates; the design space puts it in front of a
 * template's source, after the knob #defines, so a candidate stays one file.
 *   DELTA_SCALAR_GATE  0: g is [B,T,HV,K] (KDA); 1: g is [B,T,HV] (GDN)
 *   DELTA_SYMBOL       exported entry point (kda_forward, gdn_forward)
 *   DELTA_HUGE_OUTPUTS 1: 2 MB pages behind the outputs (madvise) before they are written
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
#ifndef DELTA_HUGE_OUTPUTS
#define DELTA_HUGE_OUTPUTS 0
#endif

typedef struct {
    const float *q, *k, *v, *g, *beta, *h0;
    float *o, *ht;
    float scale;
    int64_t B, T, H, HV, K, V;
} delta_args;

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
 * exp(x) for float, branch-free so loops over it vectorise (checked with -fopt-info-vec) with any -march and without
 * -ffast-math (libm's expf is a scalar call there). Cody-Waite reduction by ln 2 and
 * Cephes' degree-6 polynomial: about 1 ulp for |x| <= 87. Arguments below -87.3 give
 * ~1e-38; callers keep arguments below 88.
 */
static inline __attribute__((always_inline)) float delta_exp(float x)
{
    /* clamp below at -87.3 on the bits, as a masked select (a conditional expression on
     * integers counts as control flow to the vectoriser): a negative float's bits grow
     * with its magnitude */
    union { float f; int32_t i; } in = { .f = x };
    const int32_t floor_bits = (int32_t)0xC2AE999Au;  /* -87.3f */
    const int32_t below = -((in.i < 0) & (in.i > floor_bits));  /* all ones where below */
    in.i ^= (in.i ^ floor_bits) & below;
    x = in.f;
    const float y = x * 1.44269504088896341f + 0.5f;
    const float truncated = (float)(int)y;
    const float n = truncated - (y < truncated ? 1.0f : 0.0f);  /* floor */
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

#if DELTA_HUGE_OUTPUTS
#include <sys/mman.h>
/* Ask for 2 MB pages behind the 2 MB-aligned interior of an output buffer before it is
 * first written: a freshly allocated output (what fla's API and every benchmark hand
 * over) then takes 512x fewer page faults. A hint only: contents are untouched, and
 * pages already faulted in stay as they are. */
static void advise_huge_pages(void *buffer, size_t bytes)
{
    const uintptr_t huge = (uintptr_t)1 << 21;
    const uintptr_t first = ((uintptr_t)buffer + huge - 1) & ~(huge - 1);
    const uintptr_t last = ((uintptr_t)buffer + bytes) & ~(huge - 1);
    if (last > first) (void)madvise((void *)first, last - first, MADV_HUGEPAGE);
}

static void advise_outputs(const delta_args *a)
{
    advise_huge_pages(a->o, (size_t)(a->B * a->T * a->HV * a->V) * sizeof(float));
    if (a->ht) advise_huge_pages(a->ht, (size_t)(a->B * a->HV * a->K * a->V) * sizeof(float));
}
#else
static void advise_outputs(const delta_args *a) { (void)a; }
#endif

static int delta_shape_ok(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    return B >= 1 && T >= 1 && H >= 1 && HV >= 1 && K >= 1 && V >= 1 && HV % H == 0;
}
