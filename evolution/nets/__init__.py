"""The networks of this project and the fairseq they are built on.

* :mod:`~evolution.nets.encoder`: the one encoder class that MT, LM and MLM share;
* :mod:`~evolution.nets.objectives`: the three fairseq models around it;
* :mod:`~evolution.nets.compat`: every workaround fairseq 0.12 needs (decision 2).

Both :mod:`evolution.training` (which trains them) and :mod:`evolution.models`
(which loads them for extraction) import from here; this package imports
neither, so no two packages import each other.
"""
