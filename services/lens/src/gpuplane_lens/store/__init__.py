"""Persistence adapter: SQLAlchemy (SQLite or PostgreSQL), Alembic migrations, encrypted kubeconfigs."""
