"""evolution: how token representations evolve through the layers of Transformers
trained with different objectives (Voita, Sennrich & Titov, EMNLP 2019).

Data flows one way: config -> corpus -> models -> representations (Zarr) ->
metrics -> report. See ``docs/decisions.md`` for the choices made on the way.
"""

__version__ = "0.1.0"
