"""Built-in agents: need no network, each owns one domain of a design space."""

from swarmfab.agents.builtin.bandit import BanditAgent, bandit_agents
from swarmfab.agents.builtin.local_search import LocalSearchAgent, RestartAgent, domain_agents
from swarmfab.agents.builtin.recall import RecallAgent
from swarmfab.agents.builtin.starting import StartingPointsAgent

__all__ = ["BanditAgent", "LocalSearchAgent", "RecallAgent", "RestartAgent",
           "StartingPointsAgent", "bandit_agents", "domain_agents"]
