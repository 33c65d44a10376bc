# KDA forward in Triton: a chunked (WY/UT) kernel and a per-token (decode) kernel.
#
# The chunked kernel follows swarmfab.workloads._delta_math.chunked line for line, so a
# reviewer can hold the two side by side:
#   G = cumsum(g) within the chunk (inclusive); every decay is exp(G_i - G_j) with j <= i,
#   masked *before* the exponent, so no exponent is positive and strong decay cannot
#   overflow; L[i,j] = beta_i k_i.(k_j exp(G_i - G_j)) (j < i); M = (I + L)^-1 diag(beta)
#   by forward substitution; W = M (K exp G); U = M V; per chunk V' = U - W S,
#   O = (scale Q exp G) S + Aqk V', S = diag(exp G_C) S + (K exp(G_C - G))^T V'.
# One program owns one (batch, value head, tile of value columns); the state tile stays
# in registers for the whole sequence (value columns evolve independently).
# The knob header above this comment (ALGORITHM, CHUNK, BLOCK_V, DOT_PRECISION,
# NUM_WARPS) is written by swarmfab's design space.
import torch
import triton
import triton.language as tl


@triton.jit
def kda_chunked_kernel(
    q, k, v, g, beta, h0, o, ht, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, C: tl.constexpr,
    HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, PRECISION: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    b = i_bh // HV
    hv = i_bh % HV
    h = hv // (HV // H)
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    rc = tl.arange(0, C)
    mk = rk < K
    mv = rv < V
    state_offsets = (i_bh * K + rk[:, None]) * V + rv[None, :]
    state_mask = mk[:, None] & mv[None, :]
    state = tl.zeros((BK, BV), dtype=tl.float32)
    if HAS_H0:
        state = tl.load(h0 + state_offsets, mask=state_mask, other=0.0)
    for start in range(0, T, C):
        t = start + rc
        mt = t < T
        qk_offsets = ((b * T + t[:, None]) * H + h) * K + rk[None, :]
        qk_mask = mt[:, None] & mk[None, :]
        # padded tokens and channels read as 0: g = 0, beta = 0, k = q = 0 leave S alone
        qc = tl.load(q + qk_offsets, mask=qk_mask, other=0.0)
        kc = tl.load(k + qk_offsets, mask=qk_mask, other=0.0)
        gc = tl.load(g + ((b * T + t[:, None]) * HV + hv) * K + rk[None, :], mask=qk_mask,
                     other=0.0)
        v_offsets = ((b * T + t[:, None]) * HV + hv) * V + rv[None, :]
        vc = tl.load(v + v_offsets, mask=mt[:, None] & mv[None, :], other=0.0)
        bc = tl.load(beta + (b * T + t) * HV + hv, mask=mt, other=0.0)
        cum = tl.cumsum(gc, axis=0)
        # rows of the intra-chunk scores and of (I + L)^-1, one token at a time
        scores = tl.zeros((C, C), dtype=tl.float32)
        inverse = tl.zeros((C, C), dtype=tl.float32)
        for i in range(C):
            row = (rc == i)[:, None]
            cum_i = tl.sum(tl.where(row, cum, 0.0), axis=0)
            k_i = tl.sum(tl.where(row, kc, 0.0), axis=0)
            q_i = tl.sum(tl.where(row, qc, 0.0), axis=0)
            beta_i = tl.sum(tl.where(rc == i, bc, 0.0), axis=0)
            diff = tl.where((rc <= i)[:, None], cum_i[None, :] - cum, float("-inf"))
            k_decayed = kc * tl.exp(diff)
            kk_i = tl.sum(k_decayed * k_i[None, :], axis=1)
            qk_i = tl.sum(k_decayed * q_i[None, :], axis=1)
            lower_i = tl.where(rc < i, beta_i * kk_i, 0.0)
            inverse_i = tl.where(rc == i, 1.0, 0.0) - tl.sum(lower_i[:, None] * inverse, axis=0)
            inverse = tl.where(row, inverse_i[None, :], inverse)
            scores = tl.where(row, (qk_i * scale)[None, :], scores)
        m = inverse * bc[None, :]
        w = tl.dot(m, kc * tl.exp(cum), input_precision=PRECISION)
        u = tl.dot(m, vc, input_precision=PRECISION)
        corrected = u - tl.dot(w, state, input_precision=PRECISION)
        out = tl.dot(qc * scale * tl.exp(cum), state, input_precision=PRECISION)
        out += tl.dot(scores, corrected, input_precision=PRECISION)
        tl.store(o + v_offsets, out, mask=mt[:, None] & mv[None, :])
        cum_last = tl.sum(tl.where((rc == C - 1)[:, None], cum, 0.0), axis=0)
        k_to_end = kc * tl.exp(cum_last[None, :] - cum)
        state = state * tl.exp(cum_last)[:, None]
        state += tl.dot(tl.trans(k_to_end), corrected, input_precision=PRECISION)
    if STORE_HT:
        tl.store(ht + state_offsets, state, mask=state_mask)


@triton.jit
def kda_recurrent_kernel(
    q, k, v, g, beta, h0, o, ht, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, HAS_H0: tl.constexpr, STORE_HT: tl.constexpr,
):
    """Token by token (decode, short sequences): S = diag(exp g) S; u = beta (v - S^T k);
    S += k u^T; o = S^T (scale q)."""
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    b = i_bh // HV
    hv = i_bh % HV
    h = hv // (HV // H)
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    mk = rk < K
    mv = rv < V
    state_offsets = (i_bh * K + rk[:, None]) * V + rv[None, :]
    state_mask = mk[:, None] & mv[None, :]
    state = tl.zeros((BK, BV), dtype=tl.float32)
    if HAS_H0:
        state = tl.load(h0 + state_offsets, mask=state_mask, other=0.0)
    for t in range(0, T):
        qk_base = ((b * T + t) * H + h) * K
        q_t = tl.load(q + qk_base + rk, mask=mk, other=0.0)
        k_t = tl.load(k + qk_base + rk, mask=mk, other=0.0)
        g_t = tl.load(g + ((b * T + t) * HV + hv) * K + rk, mask=mk, other=0.0)
        v_base = ((b * T + t) * HV + hv) * V
        v_t = tl.load(v + v_base + rv, mask=mv, other=0.0)
        beta_t = tl.load(beta + (b * T + t) * HV + hv)
        state = state * tl.exp(g_t)[:, None]
        predicted = tl.sum(state * k_t[:, None], axis=0)
        update = beta_t * (v_t - predicted)
        state += k_t[:, None] * update[None, :]
        out = tl.sum(state * (q_t * scale)[:, None], axis=0)
        tl.store(o + v_base + rv, out, mask=mv)
    if STORE_HT:
        tl.store(ht + state_offsets, state, mask=state_mask)


def _tile(size: int, cap: int) -> int:
    """A power-of-two tile covering ``size`` (tl.dot needs at least 16), at most ``cap``."""
    return max(16, min(cap, triton.next_power_of_2(size)))


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    """fla's signature; q, k [B,T,H,K], v [B,T,HV,V], g [B,T,HV,K], beta [B,T,HV]."""
    q, k, v, g, beta = (x.contiguous().float() for x in (q, k, v, g, beta))
    batch, steps, heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    scale = key_dim**-0.5 if scale is None else float(scale)
    o = torch.empty_like(v)
    state_shape = (batch, value_heads, key_dim, value_dim)
    ht = v.new_empty(state_shape) if output_final_state else o
    h0 = o if initial_state is None else initial_state.contiguous().float()
    bk = _tile(key_dim, 1 << 30)
    bv = _tile(value_dim, BLOCK_V)
    grid = (triton.cdiv(value_dim, bv), batch * value_heads)
    common = dict(H=heads, HV=value_heads, K=key_dim, V=value_dim, BK=bk, BV=bv,
                  HAS_H0=initial_state is not None, STORE_HT=output_final_state,
                  num_warps=NUM_WARPS)
    if ALGORITHM == "chunked" and steps > 1:
        kda_chunked_kernel[grid](q, k, v, g, beta, h0, o, ht, scale, steps, C=CHUNK,
                                 PRECISION=DOT_PRECISION, **common)
    else:
        kda_recurrent_kernel[grid](q, k, v, g, beta, h0, o, ht, scale, steps, **common)
    return o, (ht if output_final_state else None)
