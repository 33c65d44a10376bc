"""Check a rendered Triton candidate under Triton's CPU interpreter (TRITON_INTERPRET=1).

The interpreter runs the kernels' own code with NumPy, so the GPU kernels' mathematics
can be checked against the float64 reference on a machine without a GPU. Triton reads
TRITON_INTERPRET when its own library kernels are defined (at import), so the check
runs in a fresh interpreter process: ``python triton_interpreter.py CANDIDATE CASES``
prints the failed checks as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmfab.workloads import Case


def failed_checks(source: str, cases: list[Case], directory: Path) -> list[str]:
    """The checks the candidate ``source`` fails on ``cases``, run in the interpreter."""
    pytest.importorskip("triton")
    candidate = directory / "candidate_interpreted.py"
    candidate.write_text(source)
    payload = json.dumps([case.to_dict() for case in cases])
    done = subprocess.run(
        [sys.executable, __file__, str(candidate), payload], capture_output=True, text=True,
        timeout=240, env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def _index_any_scalar() -> None:
    """Triton 3.6's interpreter turns a scalar argument used as a loop bound into an int
    with ``int(array)``, which NumPy >= 2.4 refuses for a one-element array that is not
    0-d; read the element instead (the interpreter only, not the compiler)."""
    import triton.runtime.interpreter as interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:  # another Triton: nothing to adapt
        return

    def patched(tensor: type, scope: object) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__",  # type: ignore[attr-defined]
                       lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched


def _bfloat16_dot() -> None:
    """Triton 3.9's interpreter multiplies bfloat16 operands of ``tl.dot`` as the raw
    16-bit integers it stores them in; widen them to float32 first, as tensor cores do
    (exact products, float32 accumulation: the interpreter only, not the compiler)."""
    import numpy as np
    import triton.language as tl
    import triton.runtime.interpreter as interpreter

    builder = getattr(interpreter, "InterpreterBuilder", None)
    convert = getattr(interpreter, "_convert_float", None)
    if builder is None or convert is None:  # another Triton: nothing to adapt
        return
    original = builder.create_dot

    def widened(handle: object) -> object:
        if getattr(handle, "dtype", None) != tl.bfloat16:
            return handle
        data = convert(handle.data, tl.bfloat16, tl.float32, None).view(np.float32)  # type: ignore[attr-defined]
        return interpreter.TensorHandle(data, tl.float32)

    def create_dot(self: object, a: object, b: object, *rest: object) -> object:
        return original(self, widened(a), widened(b), *rest)

    builder.create_dot = create_dot


def _bfloat16_rounding() -> None:
    """Triton 3.9's interpreter narrows float32 to bfloat16 by truncation (twice the
    error of the device's round-to-nearest-even, its default); round to nearest even,
    as torch does (the interpreter only, not the compiler)."""
    import numpy as np
    import torch
    import triton.language as tl
    import triton.runtime.interpreter as interpreter

    builder = getattr(interpreter, "InterpreterBuilder", None)
    if builder is None or not hasattr(builder, "cast_impl"):  # another Triton
        return
    original = builder.cast_impl

    def cast_impl(self: object, src: object, dst_type: object) -> object:
        if (getattr(src, "dtype", None) != tl.float32
                or getattr(dst_type, "scalar", None) != tl.bfloat16):
            return original(self, src, dst_type)
        wide = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))  # type: ignore[attr-defined]
        narrow = wide.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        return interpreter.TensorHandle(narrow, tl.bfloat16)

    builder.cast_impl = cast_impl


def _check(candidate: Path, cases: list[Case]) -> list[str]:
    import importlib.util

    import torch

    from swarmfab.verify import compare_outputs
    from swarmfab.workloads.delta.kda import KDA

    torch.set_num_threads(1)
    _index_any_scalar()
    _bfloat16_dot()
    _bfloat16_rounding()
    spec = importlib.util.spec_from_file_location("candidate_interpreted", candidate)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kda, failed = KDA(), []
    for case in cases:  # in the case's dtype, with its tolerances, as the verifier does
        inputs = kda.make_inputs(case)
        reference = kda.reference(inputs)  # first: a pooled call updates its inputs
        outputs = kda.call(module.forward, inputs)
        dtypes = {name: kda.output_dtype(case, name) for name in reference}
        checks = compare_outputs(case.name, outputs, reference,
                                 kda.tolerances(case.torch_dtype), dtypes)
        failed += [str(check) for check in checks if not check.passed]
    return failed


if __name__ == "__main__":
    chosen = [Case.from_dict(data) for data in json.loads(sys.argv[2])]
    print(json.dumps(_check(Path(sys.argv[1]), chosen)))
