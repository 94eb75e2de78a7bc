"""The lists of analyses that the API and the trajectory use come from the one registry,
:data:`evolution.analyses.ANALYSES`: a new analysis is one ``Analysis`` subclass named there,
and no other list has to learn of it."""

from __future__ import annotations

import pytest


def _every_analysis_on():
    from evolution.config import MetricsConfig

    return MetricsConfig.model_validate({"importance": {}, "probes": {}, "pruning": {}})


def test_the_sections_are_the_analyses_sections_of_the_config():
    """Every ``metrics`` field that switches an analysis on is the section of one in the registry,
    and nothing else is."""
    from evolution.analyses import ANALYSES, SECTIONS
    from evolution.config import MetricsConfig

    settings = {"tokens", "trajectory", "reuse", "store", "device"}  # not analyses: how and where they run
    assert set(SECTIONS) == set(MetricsConfig.model_fields) - settings
    assert len(SECTIONS) == len(set(SECTIONS))
    assert {a.section for a in ANALYSES if a.section is not None} == set(SECTIONS)


@pytest.mark.parametrize("kept", [["mi"], ["neighbors", "heads"], ["similarity"]])
def test_a_snapshot_runs_only_the_trajectorys_analyses(kept):
    """With every analysis on in the run (the default-on t-SNE and influence among them), a
    snapshot runs exactly ``metrics.trajectory.analyses``: each other registered analysis is off."""
    from evolution.analyses import ANALYSES, enabled
    from evolution.config import TrajectoryConfig
    from evolution.snapshots import snapshot_config

    run = _every_analysis_on()
    assert len(enabled(run)) == len(ANALYSES)
    snap = snapshot_config(run, TrajectoryConfig(analyses=kept))
    on = {a.section for a in enabled(snap)}
    assert on == set(kept)


def test_the_api_turns_off_every_analysis_it_is_not_asked_for():
    from evolution.analyses import SECTIONS, enabled
    from evolution.api.analyses import metrics_config

    for section in SECTIONS:
        cfg = metrics_config({section: {}})
        assert {a.section for a in enabled(cfg)} == {section}, section


def test_a_section_known_only_to_the_registry(monkeypatch):
    """Take t-SNE out of the registry: the API no longer knows it and a snapshot leaves its section
    as the run has it (neither keeps a list of its own)."""
    import evolution.analyses as analyses
    from evolution.api.analyses import metrics_config
    from evolution.config import TrajectoryConfig
    from evolution.snapshots import snapshot_config

    monkeypatch.setattr(analyses, "ANALYSES", tuple(a for a in analyses.ANALYSES if a.section != "tsne"))
    monkeypatch.setattr(analyses, "SECTIONS", tuple(s for s in analyses.SECTIONS if s != "tsne"))
    with pytest.raises(ValueError, match=r"unknown analyses \['tsne'\]"):
        metrics_config({"tsne": {}})
    run = _every_analysis_on()
    assert snapshot_config(run, TrajectoryConfig(analyses=["mi"])).tsne == run.tsne
