/*
 * The host's peak float32 multiply-add rate: every thread keeps 16 independent chains of
 * 64-byte vector multiply-adds in flight (enough to cover the latency of two pipes on
 * every x86-64 and Arm core in use), built for the host's own ISA (-march=native). A
 * library GEMM can fall well short of this (a BLAS that takes its AVX2 path on an
 * AVX-512 machine reaches half), so the roofline takes the larger of the two.
 */
#include <omp.h>

typedef float vec __attribute__((vector_size(64)));

/* Multiply-adds per second over about `seconds`, with `threads` OpenMP threads. */
double swarmfab_fma_rate(int threads, double seconds)
{
    double flops = 0.0;
    const double begin = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    {
        vec a[16], b, c;
        for (int i = 0; i < 16; i++) a[i] = (vec){0} + (float)i;
        b = (vec){0} + 0.999f;
        c = (vec){0} + 0.001f;
        long rounds = 0;
        do {
            for (int r = 0; r < 4096; r++)
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++) a[i] = a[i] * b + c;
            rounds++;
        } while (omp_get_wtime() - begin < seconds);
        float keep = 0.0f;  /* the chains feed a result, so nothing is optimised away */
        for (int i = 0; i < 16; i++) keep += a[i][0];
        flops = rounds * 4096.0 * 16 * 16 * 2 + (keep == -1.0f);
    }
    return flops / (omp_get_wtime() - begin);
}
