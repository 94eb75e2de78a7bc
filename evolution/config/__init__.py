"""The typed schema of ``evolution.yaml``.

Every section is a pydantic model that forbids unknown keys, so a typo fails
before any work starts with a message that names the key and the fix.
Relative paths are resolved against the directory of the config file, and
files that must exist are checked at load time.

The fully resolved config (defaults filled in, paths absolute) is what the
pipeline hashes for caching and stores as provenance; see
:func:`resolved_dict`.

One module per section (:mod:`evolution.config.corpus`, ``.extract``, ``.metrics``, ...);
:mod:`evolution.config.run` holds the whole config and :func:`load_config`.
"""

from __future__ import annotations

from evolution.config.base import ConfigError
from evolution.config.cluster import ClusterConfig
from evolution.config.corpus import BIBLE_TEST, BIBLE_VALID, CorpusConfig, SplitConfig
from evolution.config.extract import AttentionConfig, ExtractConfig
from evolution.config.metrics import (
    HeadsConfig,
    ImportanceConfig,
    InfluenceConfig,
    MetricsConfig,
    MIConfig,
    NeighborsConfig,
    ProbesConfig,
    PruningConfig,
    SimilarityConfig,
    TokenSelection,
    TrajectoryConfig,
    TSNEConfig,
    TSNESelection,
)
from evolution.config.models import ModelConfig
from evolution.config.report import ReportConfig, ViewsConfig
from evolution.config.run import EvolutionConfig, load_config, parse_overrides, resolved_dict
from evolution.config.train import CheckpointSchedule, ObjectiveBudget, TrainConfig

__all__ = [
    "ConfigError",
    "ClusterConfig",
    "CorpusConfig",
    "ExtractConfig",
    "MetricsConfig",
    "AttentionConfig",
    "HeadsConfig",
    "ReportConfig",
    "ViewsConfig",
    "ModelConfig",
    "TrainConfig",
    "TrajectoryConfig",
    "CheckpointSchedule",
    "ObjectiveBudget",
    "SplitConfig",
    "BIBLE_TEST",
    "BIBLE_VALID",
    "ImportanceConfig",
    "InfluenceConfig",
    "MIConfig",
    "NeighborsConfig",
    "ProbesConfig",
    "PruningConfig",
    "SimilarityConfig",
    "TokenSelection",
    "TSNEConfig",
    "TSNESelection",
    "EvolutionConfig",
    "load_config",
    "parse_overrides",
    "resolved_dict",
]
