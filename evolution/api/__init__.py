"""The notebook API: the pipeline's own code for any model and any sentence.

>>> import evolution.api as ev
>>> bert = ev.load("sentence-transformers/all-MiniLM-L6-v2")      # a hub id (cache), a directory,
>>> mt = ev.load("results/bible-full/models/mt")                    # a shipped model, a fairseq checkpoint
>>> reps = ev.represent([mt, bert], ["In the beginning God created the heaven and the earth."])
>>> reps["mt"].hidden                                              # (layer, token, feature), as in reps.zarr
>>> ev.head_view(bert, "The cat sat on the mat")                   # inline in Jupyter, offline
>>> ev.mi(reps), ev.neighbors(reps), ev.similarity(reps), ev.heads(reps)   # metrics.zarr groups
>>> ev.plot.mi(ev.mi(reps), models=["mt"], layers=range(7), ax=None)      # one panel, returns the figure
>>> pythia = ev.load_series("EleutherAI/pythia-70m", revisions=["step1000", "step143000"])  # a checkpoint series
>>> traj = ev.trajectory(pythia, sentences)                            # the groups of trajectory.zarr
>>> clean = ev.from_transformer_lens(cache, tokens, tokenizer=bridge.tokenizer)  # activations held elsewhere
>>> ev.compare(clean, ablated)                                         # per layer: distance, MI change, intervals

Every function runs what the pipeline runs (extraction into a Zarr store, in memory here;
the analyses' units and groups; the report's views and figures), so a dataset from here and
one from a run's ``reps.zarr`` / ``metrics.zarr`` are interchangeable (docs/api.md).
"""

from evolution.api import plot
from evolution.api.analyses import (
    analyse,
    change,
    dependency_heads,
    heads,
    importance,
    influence,
    mi,
    neighbors,
    probes,
    similarity,
)
from evolution.api.compare import compare
from evolution.api.examples import example_sentences
from evolution.api.interop import from_activations, from_nnsight, from_transformer_lens
from evolution.api.model import Model, load
from evolution.api.represent import Representations, open_store, represent
from evolution.api.series import Series, load_series, trajectory
from evolution.api.views import ViewPage, head_view, model_view, neuron_view, views

__all__ = [
    "plot",
    "example_sentences",
    "Model",
    "load",
    "Representations",
    "represent",
    "open_store",
    "from_activations",
    "from_transformer_lens",
    "from_nnsight",
    "compare",
    "analyse",
    "mi",
    "neighbors",
    "similarity",
    "change",
    "influence",
    "heads",
    "dependency_heads",
    "importance",
    "probes",
    "ViewPage",
    "views",
    "head_view",
    "model_view",
    "neuron_view",
    "Series",
    "load_series",
    "trajectory",
]
