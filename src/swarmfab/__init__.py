"""swarmfab: a self-improving factory for verified AI inference kernels."""

__version__ = "0.1.0"
__all__ = ["__version__"]
