"""Knowledge: the store of runs, candidates and verdicts (and, later, lessons)."""

from swarmfab.knowledge.store import DEFAULT_DB, LATEST, Store, database_url

__all__ = ["DEFAULT_DB", "LATEST", "Store", "database_url"]
