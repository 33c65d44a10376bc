"""Module-level code a Python mutant calls (appended to it once): the mechanisms of the
mistakes, written as a candidate would write them. Every name starts with ``_mut_``."""

from __future__ import annotations

__all__ = ["HELPERS"]

HELPERS: dict[str, str] = {
    "contiguous": '''
def _mut_assume_contiguous(x):
    """x read through its storage with contiguous strides from its first element."""
    if not isinstance(x, torch.Tensor):
        return x
    strides = torch.empty(x.shape, device="meta").stride()
    return torch.as_strided(x, x.shape, strides, x.storage_offset())
''',
    "bfloat16": '''
def _mut_bfloat16(x):
    """x through bfloat16 and back (tensors in tuples too)."""
    if isinstance(x, tuple):
        return tuple(_mut_bfloat16(y) for y in x)
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.to(torch.bfloat16).to(x.dtype)
    return x
''',
    "shared": '''
_MUT_BUFFERS = {}


def _mut_shared(site, x):
    """x copied into a buffer kept from call to call (and shared by every thread)."""
    if isinstance(x, tuple):
        return tuple(_mut_shared((site, i), y) for i, y in enumerate(x))
    if not isinstance(x, torch.Tensor):
        return x
    key = (site, tuple(x.shape), x.dtype, x.device)
    buffer = _MUT_BUFFERS.get(key)
    if buffer is None:
        buffer = _MUT_BUFFERS[key] = torch.empty_like(x)
    buffer.copy_(x)
    return buffer


def _mut_kept(site, x):
    """x allocated once, on the first call, and handed back as it was left after that
    (a workspace cached from call to call, never cleared)."""
    if not isinstance(x, torch.Tensor):
        return x
    key = (site, tuple(x.shape), x.dtype, x.device)
    buffer = _MUT_BUFFERS.get(key)
    if buffer is None:
        buffer = _MUT_BUFFERS[key] = x
    return buffer
''',
    "lazy": '''
class _MutDeferred(torch.Tensor):
    """A tensor whose values are written in the first time anything reads it."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for value in (*args, *kwargs.values()):
            if isinstance(value, _MutDeferred) and value.__dict__.get("_mut_thunk"):
                thunk = value.__dict__.pop("_mut_thunk")
                with torch._C.DisableTorchFunctionSubclass():
                    value.copy_(thunk())
        return super().__torch_function__(func, types, args, kwargs)


def _mut_lazy(result):
    """The result's first tensor handed back unwritten, filled in on first read."""
    if isinstance(result, tuple):
        return (_mut_lazy(result[0]), *result[1:]) if result else result
    if not isinstance(result, torch.Tensor):
        return result
    done = result.detach().clone()
    with torch._C.DisableTorchFunctionSubclass():
        out = torch.empty_like(done).as_subclass(_MutDeferred)
    out.__dict__["_mut_thunk"] = lambda: done
    return out
''',
    "tagged": '''
class _MutTagged(torch.Tensor):
    """A tensor subclass that changes nothing."""


def _mut_tagged(result):
    """The result's first tensor as a subclass (the values are right)."""
    if isinstance(result, tuple):
        return (_mut_tagged(result[0]), *result[1:]) if result else result
    if not isinstance(result, torch.Tensor):
        return result
    return result.as_subclass(_MutTagged)
''',
    "later": '''
def _mut_later(result):
    """The result's first tensor returned empty; a thread fills it in just after."""
    import threading
    import time

    if isinstance(result, tuple):
        return (_mut_later(result[0]), *result[1:]) if result else result
    if not isinstance(result, torch.Tensor):
        return result
    out = torch.empty_like(result)

    def fill():
        time.sleep(0.002)
        out.copy_(result)

    threading.Thread(target=fill, daemon=True).start()
    return out
''',
    "nudge": '''
def _mut_nudge_parameters(module):
    """Every parameter scaled in place by 1 + 2**-20 on every call."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.mul_(1.0 + 2.0 ** -20)
''',
    "round_once": '''
def _mut_round_parameters_once(module):
    """On the first call, every parameter rounded in place to bfloat16."""
    if module.__dict__.get("_mut_rounded"):
        return
    module.__dict__["_mut_rounded"] = True
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(parameter.to(torch.bfloat16))
''',
    "scratch": '''
def _mut_scratch_input(x, result):
    """x used as scratch after its last read: left halved."""
    if isinstance(x, torch.Tensor):
        with torch.no_grad():
            x.mul_(0.5)
    return result
''',
    "randn_range": '''
def _mut_randn_range(x):
    """x clamped to [-100, 100], far past anything randn draws."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.clamp(-100.0, 100.0)
    return x
''',
    "no_zeros": '''
def _mut_no_zeros(x):
    """Exact zeros of x replaced by 1e-6 (a guard against dividing by zero)."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return torch.where(x == 0, torch.full_like(x, 1e-6), x)
    return x
''',
    "zero_rows": '''
def _mut_zero_rows(x, result):
    """Rows of x that are all zero give rows of zeros (a fast path for padding)."""
    if not (isinstance(x, torch.Tensor) and isinstance(result, torch.Tensor)):
        return result
    if x.dim() < 1 or result.dim() < 1 or x.shape[:-1] != result.shape[:-1]:
        return result
    empty = (x == 0).all(dim=-1, keepdim=True)
    return result.masked_fill(empty, 0.0)
''',
}
