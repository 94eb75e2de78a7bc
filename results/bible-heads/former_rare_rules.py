"""The bible-heads head statistics under a former rare-token definition, to measure what the
current one changes (results/bible-heads/README.md). Runs the pipeline in-process (use
``--set cluster=synchronous``) with one definition replaced:

- ``VARIANT=tie``: a head points to the first of the keys tied for the most maxima (np.argmax),
  where :func:`~evolution.analyses.heads.statistics.rare_token_hit` shares the hit among them;
- ``VARIANT=domain``: the annotated out-of-domain sentences (UD EWT) count too, where the current
  definition counts the main text's sentences only.

``VARIANT=tie python results/bible-heads/former_rare_rules.py configs/bible-heads.yaml --set ...``
"""

import os
import sys

import numpy as np

from evolution.analyses.heads import statistics

VARIANT = os.environ.get("VARIANT")


def first_max_hit(alpha, *, rare, queries):
    """(L, H): 1 where the first key among those with the most query maxima is a rarest token."""
    rare, queries = np.asarray(rare, bool), np.asarray(queries, bool)
    if not queries.any() or not rare.any():
        return np.zeros(np.shape(alpha)[:2])
    return rare[statistics.maxima_per_key(alpha, queries=queries).argmax(-1)].astype(float)


def _every_sentence(open_representations):
    def opened(*args, **kwargs):
        ds = open_representations(*args, **kwargs)
        ds.attrs.pop("annotated_from", None)  # no out-of-domain boundary: every sentence counts
        return ds

    return opened


if __name__ == "__main__":
    import evolution.store

    if VARIANT == "tie":
        statistics.rare_token_hit = first_max_hit
    elif VARIANT == "domain":
        evolution.store.open_representations = _every_sentence(evolution.store.open_representations)
    else:
        sys.exit("set VARIANT=tie or VARIANT=domain")
    from pipelines.run import main

    sys.exit(main(sys.argv[1:]))
