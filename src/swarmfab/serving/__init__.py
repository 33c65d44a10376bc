"""The engine factory: a serving goal in, the engine recipe that serves it best out.

``goal``: the engine goal (model, traffic, objective, metric). ``recipe``: the engine's
design space and the recipe a setting becomes (``swarmfab serve --recipe``). ``evaluate``:
a recipe started on a loopback port, verified by its tokens and loaded beside the
incumbent. ``factory``: the loop, recording into the same store as kernel runs.
``export``: a crowned recipe with its evidence.
"""
