/*
 * HOLE (a thread that outlives the call): computes honestly, and on the first call starts
 * a detached thread that keeps burning CPU whenever the kernel itself is not running.
 * Nothing checks for it: in a benchmark it would run while the incumbent is being timed
 * in the same process and slow it down (threads are allowed by the sandbox, and the
 * process probe only looks for child processes).
 * Should be caught by: a probe on the threads of the worker (a new thread still alive
 * after the call, or CPU time consumed by non-caller threads while no call is running).
 */
#include <pthread.h>
#include <time.h>
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

static volatile int inside;
static pthread_t spinner;
static int started;

static void *spin(void *unused)
{
    (void)unused;
    volatile double sink = 0.0;
    const struct timespec nap = {0, 200000};
    for (;;) {
        if (inside) { nanosleep(&nap, NULL); continue; }     /* stay out of our own way */
        for (int i = 0; i < 200000; i++) sink += 1.0;       /* ...but not of anyone else's */
        nanosleep(&nap, NULL);
    }
    return NULL;
}

int kda_forward(const float *q, const float *k, const float *v, const float *g,
                const float *beta, const float *h0, float *o, float *ht, float scale,
                int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    if (!started && pthread_create(&spinner, NULL, spin, NULL) == 0) {
        pthread_detach(spinner);
        started = 1;
    }
    inside = 1;
    const int status = compute(q, k, v, g, beta, h0, o, ht, scale, B, T, H, HV, K, V);
    inside = 0;
    return status;
}
