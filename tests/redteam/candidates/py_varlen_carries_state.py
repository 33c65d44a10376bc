"""PACKED SEQUENCES RUN AS ONE (the fast corpus's varlen cases): cu_seqlens taken, but the
packed tokens run as a single sequence, each sequence's state carried into the next and
only the first initial state used. Right for one sequence; caught by the corpus's packed
cases, one token beside a hundred."""


from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
            cu_seqlens=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    first = initial_state
    if cu_seqlens is not None and initial_state is not None:
        first = initial_state[:1]
    o, state = delta_math.chunked(q, k, v, g, beta, scale, first)
    if cu_seqlens is not None and output_final_state:  # one state per sequence, all the same
        state = state.expand(cu_seqlens.numel() - 1, *state.shape[1:]).contiguous()
    return o, state if output_final_state else None
