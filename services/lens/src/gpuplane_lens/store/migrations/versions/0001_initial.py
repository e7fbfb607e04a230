"""Clusters and sessions.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
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
    )
    op.create_index(
        "uq_clusters_name_key_nondraft",
        "clusters",
        ["name_key"],
        unique=True,
        sqlite_where=sa.text("NOT draft"),
        postgresql_where=sa.text("NOT draft"),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column(
            "cluster_id", sa.String(16), sa.ForeignKey("clusters.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_sessions_cluster_id", "sessions", ["cluster_id"])


def downgrade() -> None:
    op.drop_index("ix_sessions_cluster_id", table_name="sessions")
    op.drop_table("sessions")
    op.drop_index("uq_clusters_name_key_nondraft", table_name="clusters")
    op.drop_table("clusters")
