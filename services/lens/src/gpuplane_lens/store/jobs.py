"""Bootstrap jobs in the Lens store (same engine and key ring as the clusters)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from gpuplane_lens.domain.bootstrap import TERMINAL
from gpuplane_lens.store.db import Store
from gpuplane_lens.store.tables import bootstrap_jobs


@dataclass(frozen=True)
class JobRow:
    id: str
    phase: str
    nodes_json: str
    error: str | None
    log_tail: str
    has_kubeconfig: bool
    kubeconfig_delivered: bool
    pid: int | None
    workdir: str | None


def _row(m: Any) -> JobRow:
    return JobRow(
        id=m["id"],
        phase=m["phase"],
        nodes_json=m["nodes_json"],
        error=m["error"],
        log_tail=m["log_tail"],
        has_kubeconfig=m["kubeconfig_enc"] is not None,
        kubeconfig_delivered=bool(m["kubeconfig_delivered"]),
        pid=m["pid"],
        workdir=m["workdir"],
    )


class JobStore:
    def __init__(self, store: Store) -> None:
        self.engine = store.engine
        self.keys = store.keys

    def _create(self, job_id: str, nodes_json: str) -> None:
        now = datetime.now(UTC)
        with self.engine.begin() as conn:
            conn.execute(
                bootstrap_jobs.insert().values(
                    id=job_id,
                    phase="queued",
                    nodes_json=nodes_json,
                    error=None,
                    log_tail="",
                    kubeconfig_enc=None,
                    kubeconfig_delivered=False,
                    pid=None,
                    workdir=None,
                    created_at=now,
                    updated_at=now,
                )
            )

    def _get(self, job_id: str) -> JobRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(bootstrap_jobs).where(bootstrap_jobs.c.id == job_id)).first()
        return _row(row._mapping) if row is not None else None

    def _update(self, job_id: str, values: dict[str, Any]) -> bool:
        """Update a job that is not finished yet (a finished job never changes phase again)."""
        if "kubeconfig" in values:
            values["kubeconfig_enc"] = self.keys.encrypt(values.pop("kubeconfig"))
        with self.engine.begin() as conn:
            result = conn.execute(
                bootstrap_jobs.update()
                .where(bootstrap_jobs.c.id == job_id, bootstrap_jobs.c.phase.not_in(TERMINAL))
                .values(**values, updated_at=datetime.now(UTC))
            )
            return bool(result.rowcount)

    def _set_tail(self, job_id: str, tail: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(bootstrap_jobs.update().where(bootstrap_jobs.c.id == job_id).values(log_tail=tail))

    def _take_kubeconfig(self, job_id: str) -> str | None:
        """The kubeconfig of a succeeded job, exactly once: it is erased in the same transaction."""
        with self.engine.begin() as conn:
            token = conn.execute(
                sa.select(bootstrap_jobs.c.kubeconfig_enc).where(
                    bootstrap_jobs.c.id == job_id,
                    bootstrap_jobs.c.phase == "succeeded",
                    sa.not_(bootstrap_jobs.c.kubeconfig_delivered),
                )
            ).scalar_one_or_none()
            if token is None:
                return None
            result = conn.execute(
                bootstrap_jobs.update()
                .where(bootstrap_jobs.c.id == job_id, sa.not_(bootstrap_jobs.c.kubeconfig_delivered))
                .values(kubeconfig_enc=None, kubeconfig_delivered=True)
            )
            if result.rowcount != 1:
                return None
        return self.keys.decrypt(token)

    def _unfinished(self) -> list[JobRow]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(bootstrap_jobs).where(bootstrap_jobs.c.phase.not_in(TERMINAL)))
            return [_row(r._mapping) for r in rows]

    async def create(self, job_id: str, nodes_json: str) -> None:
        await asyncio.to_thread(self._create, job_id, nodes_json)

    async def get(self, job_id: str) -> JobRow | None:
        return await asyncio.to_thread(self._get, job_id)

    async def update(self, job_id: str, **values: Any) -> bool:
        return await asyncio.to_thread(self._update, job_id, values)

    async def set_tail(self, job_id: str, tail: str) -> None:
        await asyncio.to_thread(self._set_tail, job_id, tail)

    async def take_kubeconfig(self, job_id: str) -> str | None:
        return await asyncio.to_thread(self._take_kubeconfig, job_id)

    async def unfinished(self) -> list[JobRow]:
        return await asyncio.to_thread(self._unfinished)
