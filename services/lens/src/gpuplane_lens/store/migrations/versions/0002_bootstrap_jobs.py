"""Bootstrap jobs.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bootstrap_jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("nodes_json", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("log_tail", sa.Text(), nullable=False),
        sa.Column("kubeconfig_enc", sa.LargeBinary(), nullable=True),
        sa.Column("kubeconfig_delivered", sa.Boolean(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("workdir", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("bootstrap_jobs")
