"""Orchestration only: the CLI (:mod:`pipelines.run`), stages and caching
(:mod:`pipelines.stages`) and Dask client set-up (:mod:`pipelines.cluster`)."""
