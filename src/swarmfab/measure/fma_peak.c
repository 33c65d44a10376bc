/*
 * The host's peak float32 multiply-add rate, built for the host's own ISA (-march=native).
 * Every thread keeps independent chains of vector multiply-adds in flight, enough to
 * cover the latency of two pipes, and no more chains than the ISA has vector registers:
 * a chain spilled to the stack adds a load and a store to every multiply-add. Two loops
 * are timed and the faster counts, since which vector width is native is the compiler's
 * business:
 *   - 32-byte vectors, 12 chains (AVX2: 16 ymm registers);
 *   - 64-byte vectors, 16 chains (AVX-512: 32 zmm registers).
 * Before, only the 64-byte loop ran; on an AVX2 host its 16 chains are 32 ymm registers,
 * and the spills held it to 60% of the rate the 32-byte loop reaches (105 against 177
 * GFLOP/s on a 2-core AMD EPYC, znver3). A library GEMM can fall well short of either (a
 * BLAS that takes its AVX2 path on an AVX-512 machine reaches half), so the roofline takes
 * the larger of this and a GEMM.
 */
#include <omp.h>

typedef float vec32 __attribute__((vector_size(32)));
typedef float vec64 __attribute__((vector_size(64)));

/* Multiply-adds per second of `chains` chains of `vec` over about `seconds`. */
#define FMA_RATE(name, vec, chains)                                                       \
    static double name(int threads, double seconds)                                       \
    {                                                                                     \
        const int lanes = (int)(sizeof(vec) / sizeof(float));                             \
        double flops = 0.0;                                                               \
        const double begin = omp_get_wtime();                                             \
        _Pragma("omp parallel num_threads(threads) reduction(+ : flops)")                 \
        {                                                                                 \
            vec a[chains], b, c;                                                          \
            for (int i = 0; i < chains; i++) a[i] = (vec){0} + (float)i;                  \
            b = (vec){0} + 0.999f;                                                        \
            c = (vec){0} + 0.001f;                                                        \
            long rounds = 0;                                                              \
            do {                                                                          \
                for (int r = 0; r < 4096; r++)                                            \
                    _Pragma("GCC unroll 16")                                              \
                    for (int i = 0; i < chains; i++) a[i] = a[i] * b + c;                 \
                rounds++;                                                                 \
            } while (omp_get_wtime() - begin < seconds);                                  \
            float keep = 0.0f; /* the chains feed a result: nothing is optimised away */  \
            for (int i = 0; i < chains; i++) keep += a[i][0];                             \
            flops = rounds * 4096.0 * chains * lanes * 2 + (keep == -1.0f);               \
        }                                                                                 \
        return flops / (omp_get_wtime() - begin);                                         \
    }

FMA_RATE(rate_32_bytes, vec32, 12)
FMA_RATE(rate_64_bytes, vec64, 16)

/* Multiply-adds per second with `threads` OpenMP threads, the faster of the two loops,
 * each timed for about `seconds` (a shorter window is more easily lost whole to another
 * process on a core: a run's setup once read 96 GFLOP/s where the host does 178). */
double swarmfab_fma_rate(int threads, double seconds)
{
    const double narrow = rate_32_bytes(threads, seconds);
    const double wide = rate_64_bytes(threads, seconds);
    return narrow > wide ? narrow : wide;
}
