"""Agents propose candidates; built-in ones search declared design spaces."""

from swarmfab.agents.base import Agent, Context

__all__ = ["Agent", "Context"]
