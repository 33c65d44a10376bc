"""A user's model, from where its time goes to a faster model: ``swarmfab model``.

``target`` loads the model (a Hugging Face directory or ``module.py:factory``) and the
phases that matter (prefill and decode, or one forward); ``profile`` finds its parts
and their shares of the time; ``extract`` writes each part worth working on as a
problem file; ``study`` runs the stages in one budget, the factory on each part (the
command layer hands it ``execute_goal``); ``assemble`` puts the crowned parts back,
checks the model end to end and times it side by side with the original.
"""

from swarmfab.model.assemble import EndToEnd, Patched, PhaseTiming, check_end_to_end
from swarmfab.model.extract import Extraction, extract_part
from swarmfab.model.profile import PhaseProfile, find_parts, profile_phase
from swarmfab.model.study import Options, PartOutcome, Study, study
from swarmfab.model.target import Phase, Target, load_target, phases_of

__all__ = ["EndToEnd", "Extraction", "Options", "PartOutcome", "Patched", "Phase",
           "PhaseProfile", "PhaseTiming", "Study", "Target", "check_end_to_end",
           "extract_part", "find_parts", "load_target", "phases_of", "profile_phase",
           "study"]
