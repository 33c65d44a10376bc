/* The gated delta rule in float64, token by token: the verifier's reference.
 *
 * The same recurrence as _delta_math.recurrent (the PyTorch form, which tests hold this
 * file to), without the interpreter: for every (batch, value head) and token,
 *
 *     S = diag(exp g_t) S;  u = beta_t (v_t - S^T k_t);  S += k_t u^T;  o_t = S^T (scale q_t)
 *
 * Layouts (row-major, contiguous, float64): q, k [B,T,H,K]; v, o [B,T,HV,V];
 * g [B,T,HV,K] (a scalar gate arrives repeated over K); beta [B,T,HV]; h0, ht [B,HV,K,V]
 * (h0 may be NULL: a zero state). Value head hv reads query/key head hv / (HV / H).
 * Trusted platform code: it never sees a candidate. It computes the (batch, value head)
 * pairs first..last-1 (of B*HV), so callers may split the work between threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int delta_reference_f64(const double *q, const double *k, const double *v, const double *g,
                        const double *beta, const double *h0, double *o, double *ht,
                        double scale, int64_t B, int64_t T, int64_t H, int64_t HV,
                        int64_t K, int64_t V, int64_t first, int64_t last)
{
    if (B < 1 || T < 0 || H < 1 || HV < H || HV % H || K < 1 || V < 1 || first < 0 ||
        last > B * HV || first > last)
        return 1;
    double *decay = malloc(sizeof(double) * K);
    double *u = malloc(sizeof(double) * V);
    if (!decay || !u) {
        free(decay);
        free(u);
        return 2;
    }
    const int64_t group = HV / H;
    for (int64_t pair = first; pair < last; pair++) {
        const int64_t b = pair / HV, hv = pair % HV, h = hv / group;
        double *S = ht + (b * HV + hv) * K * V;
        if (h0)
            memcpy(S, h0 + (b * HV + hv) * K * V, sizeof(double) * K * V);
        else
            memset(S, 0, sizeof(double) * K * V);
        for (int64_t t = 0; t < T; t++) {
            const double *qt = q + ((b * T + t) * H + h) * K;
            const double *kt = k + ((b * T + t) * H + h) * K;
            const double *vt = v + ((b * T + t) * HV + hv) * V;
            const double *gt = g + ((b * T + t) * HV + hv) * K;
            const double bt = beta[(b * T + t) * HV + hv];
            double *ot = o + ((b * T + t) * HV + hv) * V;
            for (int64_t i = 0; i < K; i++)
                decay[i] = exp(gt[i]);
            for (int64_t j = 0; j < V; j++)
                u[j] = 0.0;
            for (int64_t i = 0; i < K; i++) { /* decay, then predicted = S^T k */
                double *row = S + i * V;
                const double di = decay[i], ki = kt[i];
                for (int64_t j = 0; j < V; j++) {
                    row[j] *= di;
                    u[j] += ki * row[j];
                }
            }
            for (int64_t j = 0; j < V; j++)
                u[j] = bt * (vt[j] - u[j]);
            for (int64_t j = 0; j < V; j++)
                ot[j] = 0.0;
            for (int64_t i = 0; i < K; i++) { /* rank-1 update, then the readout */
                double *row = S + i * V;
                const double ki = kt[i], qi = qt[i] * scale;
                for (int64_t j = 0; j < V; j++) {
                    row[j] += ki * u[j];
                    ot[j] += qi * row[j];
                }
            }
        }
    }
    free(decay);
    free(u);
    return 0;
}
