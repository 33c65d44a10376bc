"""Gated delta rule mathematics in PyTorch, in two independent formulations.

Both take fla's layout (q, k ``[B,T,H,K]``; v ``[B,T,HV,V]``; g ``[B,T,HV,K]`` log decay per
key channel; beta ``[B,T,HV]``; state ``[B,HV,K,V]``) and compute in the dtype of their
arguments. The recurrent form, run in float64, is the reference; the chunked (WY/UT) form
shares no code with it and cross-checks it. In float32 they are the PyTorch baselines.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

__all__ = ["GATE_FLOOR", "chunked", "compiled_token_step", "expand_heads", "recurrent",
           "token_step", "token_step_"]


GATE_FLOOR = -30.0  # a log decay below this is raised to it in the chunked form


def expand_heads(x: torch.Tensor, value_heads: int) -> torch.Tensor:
    """Repeat q/k heads so value head ``hv`` reads head ``hv // (HV // H)`` (GVA)."""
    heads = x.shape[2]
    return x if heads == value_heads else x.repeat_interleave(value_heads // heads, dim=2)


def recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor | None,
    step: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token by token: S = diag(exp g) S; S += k (beta (v - S^T k))^T; o = S^T (scale q).

    ``step`` replaces :func:`token_step` (e.g. by its compiled version). ``in_place``:
    ``initial_state`` (of v's dtype) is advanced where it lies and returned as the final
    state, two passes over it per token instead of four and no copy."""
    batch, steps, value_heads, key_dim = g.shape
    q, k = expand_heads(q, value_heads), expand_heads(k, value_heads)
    value_dim = v.shape[-1]
    if in_place:
        if initial_state is None or initial_state.dtype != v.dtype:
            raise ValueError("an in-place recurrence needs an initial state of v's dtype")
        state, step = initial_state, token_step_
    else:
        step = step or token_step
        state = (
            initial_state.to(v.dtype).clone()
            if initial_state is not None
            else v.new_zeros(batch, value_heads, key_dim, value_dim)
        )
    out = torch.empty_like(v)
    for t in range(steps):
        state, out[:, t] = step(state, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], scale)
    return out, state


def token_step(
    state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
    beta: torch.Tensor, scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token for every (batch, value head): the state after it, and the output."""
    state = state * g.exp().unsqueeze(-1)
    predicted = torch.matmul(k.unsqueeze(-2), state).squeeze(-2)         # k^T S: [B,H,V]
    update = beta.unsqueeze(-1) * (v - predicted)
    state = state + k.unsqueeze(-1) * update.unsqueeze(-2)
    return state, torch.matmul((q * scale).unsqueeze(-2), state).squeeze(-2)


def token_step_(
    state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
    beta: torch.Tensor, scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`token_step` advancing ``state`` in place (returned, with the output)."""
    state.mul_(g.exp().unsqueeze(-1))
    predicted = torch.matmul(k.unsqueeze(-2), state)                     # [B,H,1,V]
    state.addcmul_(k.unsqueeze(-1), beta[..., None, None] * (v.unsqueeze(-2) - predicted))
    return state, torch.matmul((q * scale).unsqueeze(-2), state).squeeze(-2)


@functools.cache
def compiled_token_step() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """``token_step`` through torch.compile, what a user reaches for next. Compiling
    starts a C++ compiler (a subprocess), so jobs timing it must allow processes."""
    import torch._inductor.config as inductor

    inductor.compile_threads = 1  # no pool of compile workers on a small machine
    return torch.compile(token_step, dynamic=False)


def chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor | None,
    chunk: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked WY/UT form, every intra-chunk decay with an exponent <= 0.

    Decays enter as exp(G_i - G_j) with j <= i, or through a token p between them as
    exp(G_i - G_p) * exp(G_p - G_j) (never as exp(G_i) * exp(-G_j)), so no exponent is
    positive and strong decay cannot overflow. Gates below :data:`GATE_FLOOR` are
    raised to it: exp(-30) ~ 1e-13 leaves nothing of the state a float holds, and the
    cumulative sums stay finite (an -inf gate, as masking writes, would give
    exp(-inf + inf) = NaN) and small enough to keep their precision.
    """
    g = g.clamp(min=GATE_FLOOR)
    batch, steps, value_heads, key_dim = g.shape
    value_dim = v.shape[-1]
    q, k = expand_heads(q, value_heads), expand_heads(k, value_heads)
    chunk = min(chunk, steps)  # a short sequence is one chunk, not one padded to 64
    pad = (-steps) % chunk
    if pad:  # zero-padded tokens: g = 0, beta = 0, k = q = 0 leave the state unchanged
        q, k, v, g = (torch.nn.functional.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
        beta = torch.nn.functional.pad(beta, (0, 0, 0, pad))
    chunks = (steps + pad) // chunk

    def split(x: torch.Tensor) -> torch.Tensor:  # [B,T,HV,*] -> [B,HV,N,C,*], contiguous
        x = x.reshape(batch, chunks, chunk, value_heads, *x.shape[3:])
        return x.permute(0, 3, 1, 2, *range(4, x.dim())).contiguous()

    q, k, v, g = split(q), split(k), split(v), split(g)
    beta = split(beta.unsqueeze(-1)).squeeze(-1)
    cum = g.cumsum(dim=-2)  # G, inclusive, restarting every chunk
    kk, qk = _intra_chunk_scores(q, k, cum)
    qk = qk * scale
    strictly_lower = kk.tril(-1) * beta.unsqueeze(-1)
    eye = torch.eye(chunk, dtype=v.dtype, device=v.device)
    solve_rhs = torch.diag_embed(beta)
    m = torch.linalg.solve_triangular(eye + strictly_lower, solve_rhs, upper=False)
    growth = cum.exp()  # exp(G_i) <= 1
    w = m @ (k * growth)
    u = m @ v
    q_read = q * (growth * scale)
    k_written = k * (cum[..., -1:, :] - cum).exp()  # exp(G_C - G_i) <= 1
    chunk_decay = cum[..., -1, :].exp().unsqueeze(-1)
    state = (
        initial_state.to(v.dtype).clone()
        if initial_state is not None
        else v.new_zeros(batch, value_heads, key_dim, value_dim)
    )
    out = torch.empty_like(v)
    for n in range(chunks):
        corrected = u[:, :, n] - w[:, :, n] @ state
        out[:, :, n] = q_read[:, :, n] @ state + qk[:, :, n] @ corrected
        state = state * chunk_decay[:, :, n] + k_written[:, :, n].transpose(-1, -2) @ corrected
    out = out.permute(0, 2, 3, 1, 4).reshape(batch, steps + pad, value_heads, value_dim)
    return out[:, :steps].contiguous(), state


def _intra_chunk_scores(
    q: torch.Tensor, k: torch.Tensor, cum: torch.Tensor, block: int = 4
) -> tuple[torch.Tensor, torch.Tensor]:
    """k_i.(k_j * exp(G_i - G_j)) and q_i.(k_j * exp(G_i - G_j)) for j <= i.

    Rows go ``block`` at a time. Within a block every pair's decay is taken whole, the
    mask applied before the exponent (the positive exponents of j > i are never
    evaluated). The columns before the block go through the token p just before it,
    exp(G_i - G_j) = exp(G_i - G_p) * exp(G_p - G_j): with G non-increasing both factors
    are <= 1 for j <= p < i, so neither overflows, and one that underflows stands for a
    product smaller still. That part is a matrix product; small blocks keep the pairwise
    part's temporaries in cache (4 rows: 2.5x the speed of one row at a time at B4
    T1024 HV16 K128, and of blocks of 16).
    """
    chunk = cum.shape[-2]
    kk = q.new_zeros(*cum.shape[:-1], chunk)
    qk = q.new_zeros(*cum.shape[:-1], chunk)
    for start in range(0, chunk, block):
        rows = slice(start, min(start + block, chunk))
        size = rows.stop - start
        diff = cum[..., rows, None, :] - cum[..., None, rows, :]  # [..., i, j, K]
        above = torch.ones(size, size, dtype=torch.bool, device=cum.device).triu(1)
        decay = diff.masked_fill(above.unsqueeze(-1), -torch.inf).exp()  # j > i: 0
        k_decayed = k[..., None, rows, :] * decay
        kk[..., rows, rows] = (k[..., rows, None, :] * k_decayed).sum(-1)
        qk[..., rows, rows] = (q[..., rows, None, :] * k_decayed).sum(-1)
        if start:
            pivot = cum[..., start - 1 : start, :]
            to_row = (cum[..., rows, :] - pivot).exp()  # exp(G_i - G_p) <= 1
            earlier = (k[..., :start, :] * (pivot - cum[..., :start, :]).exp()).transpose(-1, -2)
            kk[..., rows, :start] = (k[..., rows, :] * to_row) @ earlier
            qk[..., rows, :start] = (q[..., rows, :] * to_row) @ earlier
    return kk, qk
