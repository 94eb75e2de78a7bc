"""``cluster``: where the Dask task graphs run."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from evolution.config.base import _Section


class ClusterConfig(_Section):
    """Where the Dask task graphs run.

    ``kind: local`` starts a :class:`distributed.LocalCluster` of worker
    processes sized to the machine (one single-threaded worker per core unless
    ``n_workers`` says otherwise); ``kind: address`` connects to a running
    scheduler; ``kind: synchronous`` runs every task in this process, which is
    what a debugger wants; ``kind: slurm`` submits ``jobs`` Slurm jobs of ``cores`` cores and
    ``memory`` each (``dask_jobqueue.SLURMCluster``, the ``slurm`` extra), one single-threaded
    worker per core (``cores / threads_per_worker`` per job), and submits a new job for one that
    ends (``scancel``, a node failure, its walltime).
    """

    kind: Literal["local", "address", "synchronous", "slurm"] = "local"
    address: str | None = Field(None, description="scheduler address, e.g. tcp://host:8786")
    n_workers: int | None = Field(None, ge=1, description="local workers; default: one per core")
    threads_per_worker: int = Field(1, ge=1)
    memory_limit: str = Field("auto", description="per local worker, as distributed accepts it")
    # kind: slurm (docs/config.md, "Slurm")
    jobs: int | None = Field(None, ge=1, description="slurm: worker jobs kept running")
    cores: int | None = Field(None, ge=1, description="slurm: cores per job (--cpus-per-task)")
    memory: str | None = Field(None, description="slurm: memory per job, e.g. 16GB (--mem)")
    walltime: str | None = Field(None, description="slurm: time limit per job, e.g. 01:00:00 (--time)")
    queue: str | None = Field(None, description="slurm: partition (--partition); default: the site's")
    account: str | None = Field(None, description="slurm: account charged (--account)")
    job_extra: list[str] = Field(default_factory=list, description="slurm: more #SBATCH options, e.g. --qos=short")
    python: str | None = Field(None, description="slurm: the Python on the nodes; default: this one")
    start_timeout: int | None = Field(
        None, ge=1, description="slurm: seconds to wait for the first worker (jobs pending); default 600"
    )

    #: the keys only ``kind: slurm`` reads, and those it requires
    SLURM_KEYS: ClassVar[tuple[str, ...]] = (
        "jobs",
        "cores",
        "memory",
        "walltime",
        "queue",
        "account",
        "job_extra",
        "python",
        "start_timeout",
    )
    SLURM_REQUIRED: ClassVar[tuple[str, ...]] = ("jobs", "cores", "memory", "walltime")

    @field_validator("walltime", mode="before")
    @classmethod
    def _sexagesimal(cls, v: Any) -> Any:
        # YAML 1.1 (PyYAML) reads an unquoted 01:30:00 as the base-60 integer 5400
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v // 3600:02d}:{v // 60 % 60:02d}:{v % 60:02d}"
        return v

    @model_validator(mode="after")
    def _address_iff_kind(self) -> ClusterConfig:
        if self.kind == "address" and not self.address:
            raise ValueError(
                "cluster.kind is 'address' but cluster.address is empty; "
                "give the scheduler address, e.g. address: tcp://host:8786"
            )
        if self.kind != "address" and self.address:
            raise ValueError(
                f"cluster.address is set but cluster.kind is {self.kind!r}; set kind: address or remove the address"
            )
        set_ = [k for k in self.SLURM_KEYS if getattr(self, k)]
        if self.kind != "slurm" and set_:
            verb = "is" if len(set_) == 1 else "are"
            raise ValueError(
                f"cluster.{', cluster.'.join(set_)} {verb} only for kind: slurm but cluster.kind is {self.kind!r}; "
                "set kind: slurm or remove them"
            )
        if self.kind == "slurm":
            missing = [k for k in self.SLURM_REQUIRED if getattr(self, k) is None]
            if missing:
                verb = "is" if len(missing) == 1 else "are"
                raise ValueError(
                    f"cluster.kind is 'slurm' but cluster.{', cluster.'.join(missing)} {verb} missing; give e.g. "
                    "{kind: slurm, jobs: 4, cores: 8, memory: 32GB, walltime: '02:00:00'} (docs/config.md)"
                )
            if self.n_workers is not None or self.memory_limit != "auto":
                raise ValueError(
                    "cluster.n_workers / cluster.memory_limit are for kind: local; on Slurm the workers are "
                    "cluster.jobs x cluster.cores / cluster.threads_per_worker and share cluster.memory"
                )
            if self.cores % self.threads_per_worker:  # type: ignore[operator]
                raise ValueError(
                    f"cluster.cores ({self.cores}) is not a multiple of cluster.threads_per_worker "
                    f"({self.threads_per_worker}); each job runs cores / threads_per_worker workers"
                )
            if not re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", self.walltime or ""):
                raise ValueError(
                    f"cluster.walltime {self.walltime!r} is not a Slurm time; write HH:MM:SS (e.g. '01:30:00', "
                    "quoted in YAML) or D-HH:MM:SS"
                )
            from dask.utils import parse_bytes

            try:
                parse_bytes(str(self.memory))
            except (ValueError, TypeError):
                raise ValueError(f"cluster.memory {self.memory!r} is not a size; write e.g. 16GB or 3500MB") from None
        return self


def _coerce_cluster(value: Any) -> Any:
    # Shorthands: `cluster: local`, `cluster: synchronous`, `cluster: {address: tcp://...}`.
    if isinstance(value, str):
        if value.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
            return {"kind": "address", "address": value}
        return {"kind": value}
    if isinstance(value, dict) and "address" in value and "kind" not in value:
        return {"kind": "address", **value}
    return value
