"""An inference engine for hybrid KDA / attention decoders (the Kimi Linear family).

Kernel slots let a factory champion replace any hot operator; the scheduler batches
requests continuously; ``server`` speaks the OpenAI HTTP API; ``loadgen`` measures it.
"""
