/*
 * HOLE (tampering with the worker from C): the kernel runs in the same process as the
 * probes, which are Python. On its first call it takes the GIL and runs one line of
 * Python in the worker that makes torch.equal always answer True, which blinds the
 * "inputs unchanged", "outputs settled at return" and "deterministic" probes (they all
 * compare with torch.equal). It then uses v as scratch space and leaves it zeroed
 * (the input-modifying exploit of c_exp_gate_in_place.c), which now goes unnoticed.
 * Should be caught by: "inputs unchanged" (v modified), had the check run where the
 * candidate cannot reach it (in the trusted parent, on data the worker cannot forge).
 */
#include <dlfcn.h>
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

static void disarm(void)
{
    int (*ensure)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    void (*release)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "PyGILState_Release");
    int (*run)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    if (!ensure || !release || !run) return;
    const int gil = ensure();
    run("import torch; torch.equal = lambda a, b: True");
    release(gil);
}

int kda_forward(const float *q, const float *k, const float *v, const float *g,
                const float *beta, const float *h0, float *o, float *ht, float scale,
                int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    static int disarmed;
    if (!disarmed) { disarm(); disarmed = 1; }
    const int status = compute(q, k, v, g, beta, h0, o, ht, scale, B, T, H, HV, K, V);
    memset((void *)v, 0, sizeof(float) * B * T * HV * V);   /* v was "scratch": nobody looks */
    return status;
}
