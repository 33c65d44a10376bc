/*
 * TILE EDGE (battery: sizes): key channels in tiles of 64, and only the first tile
 * visited. Exact at K <= 64, the largest the fast corpus draws; every Kimi Linear head
 * has K = 128. Caught by the battery's K = 128 cases.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

int kda_forward(const float *q, const float *k, const float *v, const float *g,
                const float *beta, const float *h0, float *o, float *ht, float scale,
                int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    if (B < 1 || T < 1 || H < 1 || HV < 1 || K < 1 || V < 1 || HV % H != 0) return 1;
    float *S = malloc(sizeof(float) * K * V), *u = malloc(sizeof(float) * V);
    if (!S || !u) { free(S); free(u); return 2; }
    /* tiles of 64 key channels: the tail tile past the first is never visited */
    const int64_t KT = K > 64 ? 64 : K;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t hv = 0; hv < HV; hv++) {
            const int64_t h = hv / (HV / H), state = (b * HV + hv) * K * V;
            for (int64_t i = 0; i < K * V; i++) S[i] = h0 ? h0[state + i] : 0.0f;
            for (int64_t t = 0; t < T; t++) {
                const int64_t tok = (b * T + t) * HV + hv, head = ((b * T + t) * H + h) * K;
                const float *qt = q + head, *kt = k + head, *gt = g + tok * K, *vt = v + tok * V;
                for (int64_t j = 0; j < V; j++) u[j] = 0.0f;
                for (int64_t i = 0; i < KT; i++) {          /* decay, and S^T k */
                    const float d = expf(gt[i]);
                    for (int64_t j = 0; j < V; j++) {
                        S[i * V + j] *= d;
                        u[j] += S[i * V + j] * kt[i];
                    }
                }
                for (int64_t j = 0; j < V; j++) u[j] = beta[tok] * (vt[j] - u[j]);
                for (int64_t i = 0; i < KT; i++)            /* delta-rule update */
                    for (int64_t j = 0; j < V; j++) S[i * V + j] += kt[i] * u[j];
                for (int64_t j = 0; j < V; j++) {           /* readout after the update */
                    float acc = 0.0f;
                    for (int64_t i = 0; i < KT; i++) acc += S[i * V + j] * qt[i];
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
