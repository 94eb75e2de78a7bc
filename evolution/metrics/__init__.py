"""Voita-style metrics on layerwise representations (Voita et al. 2019; definitions in docs/metrics.md).

One module per method; each takes plain NumPy arrays (occurrences x
feature) and labels, so it can be tested against a reference implementation
on small data and scheduled by the ``metrics`` stage per (model, layer).
"""
