/*
 * EXPLOIT (caching by pointer): remembers the input pointers and shape of the last call
 * and, when they are the same again, copies the previous outputs instead of computing
 * ("the caller is re-running the same batch"). A benchmark loop that reuses its inputs
 * would see a memcpy.
 * Caught by: the fresh-inputs probe: new values written into the very same buffers must
 * give the new answer (case "... (fresh inputs, same buffers)": o matches reference).
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

static const float *last_q, *last_h0;
static int64_t last_shape[6];
static float *saved_o, *saved_ht;

int kda_forward(const float *q, const float *k, const float *v, const float *g,
                const float *beta, const float *h0, float *o, float *ht, float scale,
                int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    const int64_t shape[6] = {B, T, H, HV, K, V};
    const size_t o_bytes = sizeof(float) * B * T * HV * V, ht_bytes = sizeof(float) * B * HV * K * V;
    if (saved_o && q == last_q && h0 == last_h0 && memcmp(shape, last_shape, sizeof shape) == 0) {
        memcpy(o, saved_o, o_bytes);                 /* "same call as last time" */
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
    last_q = q;
    last_h0 = h0;
    memcpy(last_shape, shape, sizeof shape);
    return 0;
}
