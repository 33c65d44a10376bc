/*
 * The recurrence's prefill ceiling on this core, one thread: the roofline's multiply-add loop,
 * a block's sweeps alone (group_project and group_update of the kernel's own source over
 * every tile of a K = V = 128 head, the data in cache) and the same with the block's
 * preparation (prepare(): one exp per key and token, the rescaled keys and queries, the
 * groups' dot products). Built by scripts/bench_ceiling.py with the kernel's flags,
 * -DKERNEL="<rendered source>" and fma_peak.c; prints one line per measure: name, then GFLOP/s of each
 * round (the sweeps count 6 K V per token, as the roofline does).
 */
#include KERNEL
#include <stdio.h>
#include <time.h>

#if !RC_GROUP || RC_VMAJOR
#error "the ceiling is measured for key-major groups of tokens (the recurrence's default)"
#endif

#define HEAD 128

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float sink;

/* The roofline's own multiply-add loop (src/swarmfab/measure/fma_peak.c, built beside). */
double swarmfab_fma_rate(int threads, double seconds);

/* Seconds for n blocks: with_prepare, each block prepared first. */
static double sweeps(const delta_args *a, rc_work *w, int tiles, long n, int with_prepare)
{
    float acc[RC_GROUP][RC_BV], out[RC_GROUP][RC_BV], u[RC_GROUP][RC_BV];
    const double t = now();
    for (long r = 0; r < n; r++) {
        if (with_prepare) {
            for (int d = 0; d < HEAD; d++) w->L[d] = 0.0f;
            prepare(a, w, 0, 0, 0, RC_NB);
        }
        for (int tile = 0; tile < tiles; tile++) {
            float *S = w->S + (size_t)tile * HEAD * RC_BV;
            for (int g = 0; g + RC_GROUP <= RC_NB; g += RC_GROUP) {
                group_project(S, HEAD, RC_BV, w, g, acc, out);
                for (int m = 0; m < RC_GROUP; m++)
                    for (int j = 0; j < RC_BV; j++) {
                        u[m][j] = w->beta[g + m] * (a->v[(g + m) * HEAD + j] - acc[m][j]);
                        sink += out[m][j];
                    }
                group_update(S, HEAD, RC_BV, w->KI + g * HEAD, u);
            }
        }
    }
    return now() - t;
}

int main(int argc, char **argv)
{
    const long blocks = argc > 1 ? atol(argv[1]) : 400;
    const int rounds = argc > 2 ? atoi(argv[2]) : 9;
    const int tiles = HEAD / RC_BV;
    float *q = malloc(sizeof(float) * RC_NB * HEAD), *k = malloc(sizeof(float) * RC_NB * HEAD);
    float *g = malloc(sizeof(float) * RC_NB * HEAD), *v = malloc(sizeof(float) * RC_NB * HEAD);
    float beta[RC_NB];
    srand(1);
    for (int i = 0; i < RC_NB * HEAD; i++) {
        q[i] = (float)rand() / RAND_MAX - 0.5f;
        k[i] = 0.1f * ((float)rand() / RAND_MAX - 0.5f);
        v[i] = (float)rand() / RAND_MAX - 0.5f;
        g[i] = -0.05f * (float)rand() / RAND_MAX;
    }
    for (int i = 0; i < RC_NB; i++) beta[i] = 0.5f;
    delta_args a = { .q = q, .k = k, .v = v, .g = g, .beta = beta, .scale = 0.088f,
                     .B = 1, .T = RC_NB, .H = 1, .HV = 1, .K = HEAD, .V = HEAD, .slots = 1 };
    rc_work w;
    if (!work_alloc(&w, HEAD, tiles, 1)) return 1;
    for (int i = 0; i < tiles * HEAD * RC_BV; i++) w.S[i] = 0.0f;
    for (int d = 0; d < HEAD; d++) w.L[d] = 0.0f;
    prepare(&a, &w, 0, 0, 0, RC_NB);
    const double block_flops = 6.0 * HEAD * HEAD * RC_NB;
    double rates[3][64];
    const int n = rounds < 64 ? rounds : 64;
    for (int r = 0; r < n; r++) {  /* interleaved rounds: the host's drift hits all three */
        const double swept = sweeps(&a, &w, tiles, blocks, 0);
        rates[1][r] = block_flops * blocks / swept / 1e9;
        rates[0][r] = swarmfab_fma_rate(1, swept) / 1e9;  /* as long as the sweeps took */
        rates[2][r] = block_flops * blocks / sweeps(&a, &w, tiles, blocks, 1) / 1e9;
    }
    const char *names[3] = { "fma-loop", "sweeps", "sweeps+prepare" };
    for (int m = 0; m < 3; m++) {
        printf("%s", names[m]);
        for (int r = 0; r < n; r++) printf(" %.3f", rates[m][r]);
        printf("\n");
    }
    printf("# group %d tile %d block %d vector floats %d sink %g\n", RC_GROUP, RC_BV, RC_NB,
           RC_VFLOATS, (double)sink);
    return 0;
}
