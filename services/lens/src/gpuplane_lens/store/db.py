"""The Lens store: clusters (kubeconfig encrypted) and sessions, on SQLite or PostgreSQL.

Calls are synchronous SQLAlchemy run in a worker thread (`asyncio.to_thread`) so the
event loop never blocks on the database; every write is one short transaction.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from gpuplane_core.errors import Conflict, NotFound
from gpuplane_lens.domain.records import ClusterRecord, Gateway, HfSecretRef, Proxy, SessionRecord
from gpuplane_lens.store.crypto import KeyRing
from gpuplane_lens.store.tables import clusters, sessions

_MIGRATIONS = Path(__file__).parent / "migrations"


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    return sa.create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _record(row: Any) -> ClusterRecord:
    m = row._mapping
    hf = HfSecretRef(m["hf_secret_namespace"], m["hf_secret_name"]) if m["hf_secret_name"] else None
    return ClusterRecord(
        id=m["id"],
        name=m["name"],
        description=m["description"],
        draft=bool(m["draft"]),
        created_at=_utc(m["created_at"]),
        updated_at=_utc(m["updated_at"]),
        proxy=Proxy(m["proxy_mode"], m["http_proxy"], m["https_proxy"], m["no_proxy"]),
        gateway=Gateway(
            provider=m["gateway_provider"],
            namespace_prefix=m["gateway_namespace_prefix"],
            public_url=m["gateway_public_url"],
            port=m["gateway_port"],
            authz_host=m["gateway_authz_host"],
        ),
        inotify_max_user_instances=m["inotify_max_user_instances"],
        hf_token_secret=hf,
        hf_namespace_created=bool(m["hf_namespace_created"]),
        version=m["version"],
    )


def _values(rec: ClusterRecord) -> dict[str, Any]:
    return {
        "name": rec.name,
        "name_key": rec.name.casefold(),
        "description": rec.description,
        "draft": rec.draft,
        "proxy_mode": rec.proxy.mode,
        "http_proxy": rec.proxy.http_proxy,
        "https_proxy": rec.proxy.https_proxy,
        "no_proxy": rec.proxy.no_proxy,
        "gateway_provider": rec.gateway.provider,
        "gateway_namespace_prefix": rec.gateway.namespace_prefix,
        "gateway_public_url": rec.gateway.public_url,
        "gateway_port": rec.gateway.port,
        "gateway_authz_host": rec.gateway.authz_host,
        "inotify_max_user_instances": rec.inotify_max_user_instances,
        "hf_secret_namespace": rec.hf_token_secret.namespace if rec.hf_token_secret else None,
        "hf_secret_name": rec.hf_token_secret.name if rec.hf_token_secret else None,
        "hf_namespace_created": rec.hf_namespace_created,
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
        "version": rec.version,
    }


class IdTaken(Exception):
    """The randomly drawn cluster id exists already; the caller draws another."""


def _name_conflict(name: str) -> Conflict:
    return Conflict(
        f"a cluster named {name!r} is already registered", code="cluster_name_conflict", field="name"
    )


def _not_found(cluster_id: str) -> NotFound:
    return NotFound(f"cluster {cluster_id!r} not found", code="cluster_not_found")


class Store:
    def __init__(self, engine: Engine, keys: KeyRing) -> None:
        self.engine = engine
        self.keys = keys

    # -- sync implementations (run in a thread) -------------------------------------------------

    def _create(self, rec: ClusterRecord, kubeconfig: str) -> ClusterRecord:
        values = {"id": rec.id, **_values(rec), "kubeconfig_enc": self.keys.encrypt(kubeconfig)}
        try:
            with self.engine.begin() as conn:
                conn.execute(clusters.insert().values(**values))
        except IntegrityError:
            if self._get(rec.id) is not None:
                raise IdTaken(rec.id) from None
            raise _name_conflict(rec.name) from None
        return rec

    def _get(self, cluster_id: str) -> ClusterRecord | None:
        cols = [c for c in clusters.c if c.name != "kubeconfig_enc"]
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(*cols).where(clusters.c.id == cluster_id)).first()
        return _record(row) if row is not None else None

    def _list(self, include_drafts: bool) -> list[ClusterRecord]:
        cols = [c for c in clusters.c if c.name != "kubeconfig_enc"]
        query = sa.select(*cols).order_by(clusters.c.created_at, clusters.c.id)
        if not include_drafts:
            query = query.where(sa.not_(clusters.c.draft))
        with self.engine.connect() as conn:
            return [_record(r) for r in conn.execute(query)]

    def _kubeconfig(self, cluster_id: str) -> str:
        with self.engine.connect() as conn:
            token = conn.execute(
                sa.select(clusters.c.kubeconfig_enc).where(clusters.c.id == cluster_id)
            ).scalar_one_or_none()
        if token is None:
            raise _not_found(cluster_id)
        return self.keys.decrypt(token)

    def _update(self, rec: ClusterRecord) -> ClusterRecord:
        """Write ``rec`` if the row still has ``rec.version``; the stored version becomes +1."""
        new = replace(rec, version=rec.version + 1, updated_at=datetime.now(UTC))
        values = _values(new)
        try:
            with self.engine.begin() as conn:
                result = conn.execute(
                    clusters.update()
                    .where(clusters.c.id == rec.id, clusters.c.version == rec.version)
                    .values(**values)
                )
                if result.rowcount == 0:
                    exists = conn.execute(sa.select(clusters.c.id).where(clusters.c.id == rec.id)).first()
                    if exists is None:
                        raise _not_found(rec.id)
                    raise Conflict(
                        f"cluster {rec.id!r} was modified concurrently; read it again and retry",
                        code="cluster_version_conflict",
                    )
        except IntegrityError:
            raise _name_conflict(rec.name) from None
        return new

    def _delete(self, cluster_id: str) -> bool:
        with self.engine.begin() as conn:
            conn.execute(sessions.delete().where(sessions.c.cluster_id == cluster_id))
            return bool(conn.execute(clusters.delete().where(clusters.c.id == cluster_id)).rowcount)

    def _session_for(self, cluster_id: str) -> SessionRecord:
        with self.engine.begin() as conn:
            if conn.execute(sa.select(clusters.c.id).where(clusters.c.id == cluster_id)).first() is None:
                raise _not_found(cluster_id)
            row = conn.execute(
                sa.select(sessions)
                .where(sessions.c.cluster_id == cluster_id, sessions.c.active)
                .order_by(sessions.c.created_at)
            ).first()
            if row is not None:
                m = row._mapping
                return SessionRecord(m["id"], m["cluster_id"], _utc(m["created_at"]), bool(m["active"]))
            rec = SessionRecord(str(uuid.uuid4()), cluster_id, datetime.now(UTC))
            conn.execute(
                sessions.insert().values(
                    id=rec.id, cluster_id=cluster_id, created_at=rec.created_at, active=True
                )
            )
            return rec

    def _session(self, session_id: str) -> SessionRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(sessions).where(sessions.c.id == session_id)).first()
        if row is None:
            return None
        m = row._mapping
        return SessionRecord(m["id"], m["cluster_id"], _utc(m["created_at"]), bool(m["active"]))

    def _deactivate(self, session_id: str) -> bool:
        with self.engine.begin() as conn:
            result = conn.execute(sessions.update().where(sessions.c.id == session_id).values(active=False))
            return bool(result.rowcount)

    def _rotate_keys(self) -> int:
        """Re-encrypt every kubeconfig not yet under the primary key; returns how many rows changed."""
        changed = 0
        with self.engine.begin() as conn:
            rows = conn.execute(sa.select(clusters.c.id, clusters.c.kubeconfig_enc)).all()
            for cluster_id, token in rows:
                if self.keys.is_primary(token):
                    continue
                conn.execute(
                    clusters.update()
                    .where(clusters.c.id == cluster_id)
                    .values(kubeconfig_enc=self.keys.rotate(token))
                )
                changed += 1
        return changed

    # -- async facade ---------------------------------------------------------------------------

    async def create_cluster(self, rec: ClusterRecord, kubeconfig: str) -> ClusterRecord:
        return await asyncio.to_thread(self._create, rec, kubeconfig)

    async def get_cluster(self, cluster_id: str) -> ClusterRecord:
        rec = await asyncio.to_thread(self._get, cluster_id)
        if rec is None:
            raise _not_found(cluster_id)
        return rec

    async def list_clusters(self, include_drafts: bool) -> list[ClusterRecord]:
        return await asyncio.to_thread(self._list, include_drafts)

    async def kubeconfig(self, cluster_id: str) -> str:
        return await asyncio.to_thread(self._kubeconfig, cluster_id)

    async def update_cluster(self, rec: ClusterRecord) -> ClusterRecord:
        return await asyncio.to_thread(self._update, rec)

    async def delete_cluster(self, cluster_id: str) -> bool:
        return await asyncio.to_thread(self._delete, cluster_id)

    async def session_for(self, cluster_id: str) -> SessionRecord:
        return await asyncio.to_thread(self._session_for, cluster_id)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return await asyncio.to_thread(self._session, session_id)

    async def deactivate_session(self, session_id: str) -> bool:
        return await asyncio.to_thread(self._deactivate, session_id)

    async def rotate_keys(self) -> int:
        return await asyncio.to_thread(self._rotate_keys)

    def close(self) -> None:
        self.engine.dispose()
