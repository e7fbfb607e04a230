"""Table definitions used by queries. Alembic migrations create them; a test keeps both in step."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

clusters = sa.Table(
    "clusters",
    metadata,
    sa.Column("id", sa.String(16), primary_key=True),
    sa.Column("name", sa.String(128), nullable=False),
    # Lower-cased name: uniqueness of non-draft names ignores case, enforced by the database.
    sa.Column("name_key", sa.String(128), nullable=False),
    sa.Column("description", sa.Text(), nullable=False),
    sa.Column("draft", sa.Boolean(), nullable=False),
    sa.Column("proxy_mode", sa.String(16), nullable=False),
    sa.Column("http_proxy", sa.Text(), nullable=False),
    sa.Column("https_proxy", sa.Text(), nullable=False),
    sa.Column("no_proxy", sa.Text(), nullable=False),
    sa.Column("gateway_provider", sa.String(32), nullable=True),
    sa.Column("gateway_namespace_prefix", sa.String(63), nullable=True),
    sa.Column("gateway_public_url", sa.Text(), nullable=True),
    sa.Column("gateway_port", sa.Integer(), nullable=True),
    sa.Column("gateway_authz_host", sa.Text(), nullable=True),
    sa.Column("inotify_max_user_instances", sa.Integer(), nullable=False),
    sa.Column("hf_secret_namespace", sa.String(63), nullable=True),
    sa.Column("hf_secret_name", sa.String(253), nullable=True),
    sa.Column("hf_namespace_created", sa.Boolean(), nullable=False),
    sa.Column("kubeconfig_enc", sa.LargeBinary(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Index(
        "uq_clusters_name_key_nondraft",
        "name_key",
        unique=True,
        sqlite_where=sa.text("NOT draft"),
        postgresql_where=sa.text("NOT draft"),
    ),
)

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column(
        "cluster_id",
        sa.String(16),
        sa.ForeignKey("clusters.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("active", sa.Boolean(), nullable=False),
)

bootstrap_jobs = sa.Table(
    "bootstrap_jobs",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("phase", sa.String(32), nullable=False),
    # Hosts, ports, roles and usernames only: credentials never reach the database.
    sa.Column("nodes_json", sa.Text(), nullable=False),
    sa.Column("error", sa.Text(), nullable=True),
    sa.Column("log_tail", sa.Text(), nullable=False),
    # Encrypted like cluster kubeconfigs; cleared once handed over.
    sa.Column("kubeconfig_enc", sa.LargeBinary(), nullable=True),
    sa.Column("kubeconfig_delivered", sa.Boolean(), nullable=False),
    sa.Column("pid", sa.Integer(), nullable=True),
    sa.Column("workdir", sa.Text(), nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
