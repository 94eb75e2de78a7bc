"""``cluster``: where the Dask task graphs run."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from evolution.config.base import _Section


class ClusterConfig(_Section):
    """Where the Dask task graphs run.

    ``kind: local`` starts a :class:`distributed.LocalCluster` of worker
    processes sized to the machine (one single-threaded worker per core unless
    ``n_workers`` says otherwise); ``kind: address`` connects to a running
    scheduler; ``kind: synchronous`` runs every task in this process, which is
    what a debugger wants.
    """

    kind: Literal["local", "address", "synchronous"] = "local"
    address: str | None = Field(None, description="scheduler address, e.g. tcp://host:8786")
    n_workers: int | None = Field(None, ge=1, description="local workers; default: one per core")
    threads_per_worker: int = Field(1, ge=1)
    memory_limit: str = Field("auto", description="per local worker, as distributed accepts it")

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
