"""Knowledge: the store of runs, candidates and verdicts, and the lessons drawn from them."""

from swarmfab.knowledge._schema import RunRow
from swarmfab.knowledge.lessons import LessonContext
from swarmfab.knowledge.store import DEFAULT_DB, LATEST, Store, database_url

__all__ = ["DEFAULT_DB", "LATEST", "LessonContext", "RunRow", "Store", "database_url"]
