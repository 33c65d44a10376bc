/*
 * HOLE (caching keyed by a sample of the inputs): like a pointer cache, but the key also
 * holds a few sampled input values (first and last element of q, k, v, g, beta, h0), so
 * the fresh-inputs probe, which rewrites *every* element, changes the key and forces a
 * recompute. An update to any unsampled element (a new token's v, one gate) returns stale
 * outputs; and a timing loop, which reuses the same inputs, only ever times a memcpy.
 * Should be caught by: a fresh-inputs variant that changes only part of the inputs
 * (e.g. one token of v), or a timing loop whose inputs change between calls.
 */
#include <string.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static int compute(const float *q, const float *k, const float *v, const float *g,
                const float *beta, const float *h0, float *o, float *ht, float scale,
                int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    if (B < 1 || T < 1 || H < 1 || HV < 1 || K < 1 || V < 1 || HV % H != 0) return 1;
    float *S = malloc(sizeof(float) * K * V), *u = malloc(sizeof(float) * V);
    if (!S || !u) { free(S); free(u); return 2; }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t hv = 0; hv < HV; hv++) {
            const int64_t h = hv / (HV / H), state = (b * HV + hv) * K * V;
            for (int64_t i = 0; i < K * V; i++) S[i] = h0 ? h0[state + i] : 0.0f;
            for (int64_t t = 0; t < T; t++) {
                const int64_t tok = (b * T + t) * HV + hv, head = ((b * T + t) * H + h) * K;
                const float *qt = q + head, *kt = k + head, *gt = g + tok * K, *vt = v + tok * V;
                for (int64_t j = 0; j < V; j++) u[j] = 0.0f;
                for (int64_t i = 0; i < K; i++) {           /* decay, and S^T k */
                    const float d = expf(gt[i]);
                    for (int64_t j = 0; j < V; j++) {
                        S[i * V + j] *= d;
                        u[j] += S[i * V + j] * kt[i];
                    }
                }
                for (int64_t j = 0; j < V; j++) u[j] = beta[tok] * (vt[j] - u[j]);
                for (int64_t i = 0; i < K; i++)             /* delta-rule update */
                    for (int64_t j = 0; j < V; j++) S[i * V + j] += kt[i] * u[j];
                for (int64_t j = 0; j < V; j++) {           /* readout after the update */
                    float acc = 0.0f;
                    for (int64_t i = 0; i < K; i++) acc += S[i * V + j] * qt[i];
                    o[tok * V + j] = acc * scale;
                }
            }
            if (ht)
                for (int64_t i = 0; i < K * V; i++) ht[state + i] = S[i];
        }
    }
    free(S);
    free(u);
    return 0;
}

#define SAMPLES 12
static const void *last_ptrs[6];
static int64_t last_shape[6];
static float last_sample[SAMPLES];
static float *saved_o, *saved_ht;

static void sample(float *s, const float *const *x, const int64_t *n)
{
    for (int i = 0; i < 6; i++) {
        s[2 * i] = x[i] ? x[i][0] : 0.0f;
        s[2 * i + 1] = x[i] ? x[i][n[i] - 1] : 0.0f;
    }
}

int kda_forward(const float *q, const float *k, const float *v, const float *g,
                const float *beta, const float *h0, float *o, float *ht, float scale,
                int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    const int64_t shape[6] = {B, T, H, HV, K, V};
    const float *const inputs[6] = {q, k, v, g, beta, h0};
    const int64_t sizes[6] = {B * T * H * K, B * T * H * K, B * T * HV * V, B * T * HV * K,
                              B * T * HV, B * HV * K * V};
    float now[SAMPLES];
    const size_t o_bytes = sizeof(float) * B * T * HV * V, ht_bytes = sizeof(float) * B * HV * K * V;
    sample(now, inputs, sizes);
    if (saved_o && memcmp(inputs, last_ptrs, sizeof last_ptrs) == 0
        && memcmp(shape, last_shape, sizeof shape) == 0
        && memcmp(now, last_sample, sizeof now) == 0) {
        memcpy(o, saved_o, o_bytes);                 /* "nothing changed" */
        if (ht) memcpy(ht, saved_ht, ht_bytes);
        return 0;
    }
    const int status = compute(q, k, v, g, beta, h0, o, ht, scale, B, T, H, HV, K, V);
    if (status != 0 || !ht) return status;
    free(saved_o);
    free(saved_ht);
    saved_o = malloc(o_bytes);
    saved_ht = malloc(ht_bytes);
    if (!saved_o || !saved_ht) return 2;
    memcpy(saved_o, o, o_bytes);
    memcpy(saved_ht, ht, ht_bytes);
    memcpy(last_ptrs, inputs, sizeof last_ptrs);
    memcpy(last_shape, shape, sizeof shape);
    memcpy(last_sample, now, sizeof now);
    return 0;
}
