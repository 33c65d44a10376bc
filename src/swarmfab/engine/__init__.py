"""An inference engine for hybrid KDA / attention decoders (the Kimi Linear family).

Kernel slots let a factory champion replace any hot operator; the scheduler batches
requests continuously; ``server`` speaks the OpenAI HTTP API; ``loadgen`` measures it.
The HTTP modules (``server``, ``async_engine``, ``loadgen``) are imported on their own so
offline use does not load FastAPI.
"""

from swarmfab.engine.config import ModelConfig, load_config
from swarmfab.engine.engine import EngineConfig, EngineStats, LLMEngine
from swarmfab.engine.model import HybridModel, StepBatch
from swarmfab.engine.request import FinishReason, RequestOutput, SamplingParams
from swarmfab.engine.slots import KernelSlots

__all__ = [
    "EngineConfig",
    "EngineStats",
    "FinishReason",
    "HybridModel",
    "KernelSlots",
    "LLMEngine",
    "ModelConfig",
    "RequestOutput",
    "SamplingParams",
    "StepBatch",
    "load_config",
]
