"""Adapter for pinned software checkouts (real `git`)."""
