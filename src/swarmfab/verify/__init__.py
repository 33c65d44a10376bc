"""Verification: comparing candidates with the reference on the validation corpus."""

from swarmfab.verify.compare import compare_outputs

__all__ = ["compare_outputs"]
