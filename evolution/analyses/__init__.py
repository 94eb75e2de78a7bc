"""The analyses of the ``metrics`` stage, each one module (see :mod:`evolution.analyses.base`).

To add an analysis: write a module with an :class:`~evolution.analyses.base.Analysis`
subclass (its units, its groups, its figures) and name it in :data:`ANALYSES`.
The stage, the runner and the report need no change.
"""

from evolution.analyses.base import Analysis, Inputs, ModelInputs, Unit
from evolution.analyses.change_pos import ChangeByPOS
from evolution.analyses.heads import Heads
from evolution.analyses.heads.importance import HeadImportance
from evolution.analyses.heads.probes import HeadProbes
from evolution.analyses.heads.pruning import HeadPruning
from evolution.analyses.influence import Influence
from evolution.analyses.mi import MI
from evolution.analyses.neighbors import Neighbors
from evolution.analyses.similarity import Similarity
from evolution.analyses.tsne import TSNE

__all__ = ["ANALYSES", "SECTIONS", "Analysis", "Inputs", "ModelInputs", "Unit", "enabled", "figures"]

#: Every analysis, in the order of the report.
ANALYSES: tuple[Analysis, ...] = (
    MI(),
    Neighbors(),
    Similarity(),
    ChangeByPOS(),
    Influence(),
    TSNE(),
    Heads(),
    HeadImportance(),
    HeadProbes(),
    HeadPruning(),
)


#: The ``metrics`` config sections the analyses read, in report order, each once (an analysis
#: names its own as :attr:`~evolution.analyses.base.Analysis.section`): the API's sections and
#: the sections a trajectory snapshot turns off come from here, so a new analysis needs no other list.
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(a.section for a in ANALYSES if a.section is not None))


def enabled(config) -> list[Analysis]:
    """The analyses that ``config`` (a :class:`~evolution.config.MetricsConfig`) asks for."""
    return [a for a in ANALYSES if a.enabled(config)]


def figures(path) -> dict:
    """Every figure of every analysis for the metrics store at ``path``:
    name -> (function of the path, caption), in report order."""
    out = {}
    for a in ANALYSES:
        out.update(a.figures_for(path))
    return out
