"""The templates' float exp: accurate across its range, clamped below, at every vector ISA
this host runs and with and without -ffast-math.

Every decay, rescaled key and renormalisation of the delta rule's CPU templates goes
through ``delta_exp`` (arguments clamped below at -87.3) or ``delta_exp_in_range`` (no
clamp, for arguments the caller keeps within [-87.3, 88]). Each is built here inside a
rendered candidate, as a program of its own (-ffast-math sets flush-to-zero in the
process that loads it), over a grid of the whole range and against libm's double exp.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from swarmfab.kernels._host import isa_targets
from swarmfab.workloads import design_space

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

_DRIVER = r"""
#include <math.h>
#include <stdio.h>
#define N 400001
static float xs[N], clamped[N], in_range[N];

/* the loops a template runs: vectorised as it vectorises them */
__attribute__((noinline)) static void run(int n)
{
    for (int i = 0; i < n; i++) clamped[i] = delta_exp(xs[i]);
    for (int i = 0; i < n; i++) in_range[i] = delta_exp_in_range(xs[i]);
}

int main(void)
{
    for (int i = 0; i < N; i++) xs[i] = -87.3f + (88.0f + 87.3f) * (float)i / (N - 1);
    run(N);
    double worst_clamped = 0.0, worst_in_range = 0.0;
    for (int i = 0; i < N; i++) {
        const double e = exp((double)xs[i]);
        worst_clamped = fmax(worst_clamped, fabs(clamped[i] - e) / e);
        worst_in_range = fmax(worst_in_range, fabs(in_range[i] - e) / e);
    }
    const float below[4] = { -INFINITY, -1e30f, -1000.0f, -88.0f };
    for (int i = 0; i < 4; i++) xs[i] = below[i];
    run(4);
    printf("%.9g %.9g %.9g %.9g %.9g %.9g\n", worst_clamped, worst_in_range, clamped[0],
           clamped[1], clamped[2], clamped[3]);
    return 0;
}
"""

ULP = 2.0**-23


@pytest.mark.parametrize("optimisation", ["O3", "O3-fastmath"])
@pytest.mark.parametrize("isa", [name for name, _ in isa_targets()])
def test_exp_is_accurate_over_its_range_and_clamped_below(
    isa: str, optimisation: str, tmp_path: Path
) -> None:
    space = design_space("kda")
    setting = {**space.default(), "algorithm": "recurrent", "isa": isa,
               "optimisation": optimisation}
    candidate = space.instantiate(setting, threads=1)
    source = tmp_path / "exp.c"
    source.write_text(candidate.sources[candidate.entry] + _DRIVER)
    program = tmp_path / "exp"
    subprocess.run(["gcc", *candidate.flags, "-fopenmp", "-o", str(program), str(source),
                    "-lm"], check=True, capture_output=True, timeout=120)
    out = subprocess.run([str(program)], check=True, capture_output=True, text=True,
                         timeout=60).stdout.split()
    worst_clamped, worst_in_range, *below = map(float, out)
    # Cody-Waite keeps the reduction exact without -ffast-math (about 1 ulp); -ffast-math
    # may fold its two parts of ln 2 into one, which costs tens of ulps at |x| near 87
    limit = 4 * ULP if "-ffast-math" not in candidate.flags else 128 * ULP
    assert worst_clamped <= limit, (worst_clamped / ULP, "ulp")
    assert worst_in_range <= limit, (worst_in_range / ULP, "ulp")
    for value in below:  # -inf, -1e30, -1000, -88: exp(-87.3), a normal float near 1e-38
        assert 1e-38 < value < 1.5e-38
