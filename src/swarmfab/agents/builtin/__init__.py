"""Built-in agents: need no network, each owns one domain of a design space."""

from swarmfab.agents.builtin.local_search import LocalSearchAgent, RestartAgent, domain_agents

__all__ = ["LocalSearchAgent", "RestartAgent", "domain_agents"]
