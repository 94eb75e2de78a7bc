"""fairseq ``--user-dir`` plugin: ``fairseq-train --user-dir evolution/fairseq_plugin --arch evolution_mlm ...``.

Registers the three objectives of :mod:`evolution.nets.objectives` (one
shared encoder class). The project's own training calls
:func:`evolution.nets.objectives.register` directly; both routes are
idempotent.
"""

from evolution.nets.compat import import_fairseq

import_fairseq()

from evolution.nets.objectives import register  # noqa: E402

register()
