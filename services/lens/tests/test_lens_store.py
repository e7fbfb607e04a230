"""The store on SQLite and on a real PostgreSQL server: schema, locking, uniqueness, encryption."""

from __future__ import annotations

import stat
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from cryptography.fernet import Fernet

from gpuplane_core.errors import Conflict, InternalError, NotFound
from gpuplane_lens.domain.records import ClusterRecord, HfSecretRef, new_cluster_id
from gpuplane_lens.store.crypto import KeyRing, load_or_create_key_file
from gpuplane_lens.store.db import IdTaken, Store, make_engine, migrate
from gpuplane_lens.store.tables import metadata

KUBECONFIG = (
    "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: planted-secret-token-8c1f\n"
)


def _record(name: str, draft: bool = False) -> ClusterRecord:
    now = datetime.now(UTC)
    return ClusterRecord(
        id=new_cluster_id(), name=name, description="d", draft=draft, created_at=now, updated_at=now
    )


@pytest.fixture
def store(database_url: str) -> Store:
    engine = make_engine(database_url)
    migrate(engine)
    s = Store(engine, KeyRing([Fernet.generate_key().decode()]))
    yield s
    s.close()


def test_migrations_match_the_table_definitions(store: Store) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


def test_migrate_is_idempotent(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate(engine)
    migrate(engine)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == "0002"
    engine.dispose()


async def test_create_get_list_and_drafts(store: Store) -> None:
    a = await store.create_cluster(_record("Alpha"), KUBECONFIG)
    d = await store.create_cluster(_record("Draft", draft=True), KUBECONFIG)
    got = await store.get_cluster(a.id)
    assert (got.name, got.description, got.draft, got.version, got.inotify_max_user_instances) == (
        "Alpha",
        "d",
        False,
        1,
        8192,
    )
    assert got.created_at.tzinfo is not None
    assert [r.id for r in await store.list_clusters(False)] == [a.id]
    assert {r.id for r in await store.list_clusters(True)} == {a.id, d.id}
    assert await store.kubeconfig(a.id) == KUBECONFIG
    with pytest.raises(NotFound) as info:
        await store.get_cluster("00000000")
    assert info.value.code == "cluster_not_found"


async def test_non_draft_names_are_unique_ignoring_case(store: Store) -> None:
    await store.create_cluster(_record("Prod"), KUBECONFIG)
    with pytest.raises(Conflict) as info:
        await store.create_cluster(_record("PROD"), KUBECONFIG)
    assert info.value.code == "cluster_name_conflict"
    # Drafts may share a name, with each other and with a registered cluster...
    d1 = await store.create_cluster(_record("prod", draft=True), KUBECONFIG)
    await store.create_cluster(_record("prod", draft=True), KUBECONFIG)
    # ...until one of them is promoted.
    with pytest.raises(Conflict) as info:
        await store.update_cluster(replace(d1, draft=False))
    assert info.value.code == "cluster_name_conflict"


async def test_optimistic_locking(store: Store) -> None:
    rec = await store.create_cluster(_record("Lock"), KUBECONFIG)
    first = await store.update_cluster(replace(rec, description="first"))
    assert first.version == 2
    with pytest.raises(Conflict) as info:
        await store.update_cluster(replace(rec, description="stale"))  # still names version 1
    assert info.value.code == "cluster_version_conflict"
    assert (await store.get_cluster(rec.id)).description == "first"
    hf = await store.update_cluster(
        replace(first, hf_token_secret=HfSecretRef("ns", "hf"), hf_namespace_created=True)
    )
    got = await store.get_cluster(rec.id)
    assert (
        got.hf_token_secret == HfSecretRef("ns", "hf")
        and got.hf_namespace_created
        and got.version == hf.version == 3
    )


async def test_sessions_get_or_create_and_cascade(store: Store) -> None:
    rec = await store.create_cluster(_record("S"), KUBECONFIG)
    s1 = await store.session_for(rec.id)
    s2 = await store.session_for(rec.id)
    assert s1.id == s2.id and len(s1.id) == 36
    assert (await store.get_session(s1.id)).cluster_id == rec.id
    assert await store.delete_cluster(rec.id)
    assert await store.get_session(s1.id) is None
    with pytest.raises(NotFound):
        await store.session_for(rec.id)


async def test_kubeconfig_is_encrypted_at_rest(store: Store, database_url: str) -> None:
    rec = await store.create_cluster(_record("Enc"), KUBECONFIG)
    with store.engine.connect() as conn:
        raw = conn.execute(
            sa.text("SELECT kubeconfig_enc FROM clusters WHERE id = :i"), {"i": rec.id}
        ).scalar()
    assert b"planted-secret-token" not in bytes(raw)
    if database_url.startswith("sqlite"):
        path = Path(database_url.split("///", 1)[1])
        store.close()
        for f in path.parent.glob(path.name + "*"):  # the DB, its WAL and shared-memory files
            assert b"planted-secret-token" not in f.read_bytes()


async def test_key_rotation_reencrypts_rows(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate(engine)
    old_key, new_key = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    rec = await Store(engine, KeyRing([old_key])).create_cluster(_record("Rot"), KUBECONFIG)
    rotating = Store(engine, KeyRing([new_key, old_key]))  # new key first: what a restart does
    assert await rotating.rotate_keys() == 1
    assert await rotating.rotate_keys() == 0
    assert await Store(engine, KeyRing([new_key])).kubeconfig(rec.id) == KUBECONFIG  # old key dropped
    with pytest.raises(InternalError):
        await Store(engine, KeyRing([old_key])).kubeconfig(rec.id)
    engine.dispose()


def test_key_file_is_created_0600_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "lens.key"
    keys = load_or_create_key_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_key_file(path) == keys
    path.chmod(0o644)
    with pytest.raises(PermissionError):
        load_or_create_key_file(path)


async def test_taken_id_is_not_a_name_conflict(store: Store) -> None:
    first = await store.create_cluster(_record("One"), KUBECONFIG)
    with pytest.raises(IdTaken):
        await store.create_cluster(replace(_record("Two"), id=first.id), KUBECONFIG)
