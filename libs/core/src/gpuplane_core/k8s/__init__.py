"""Kubernetes adapters: the only place in libs that imports kubernetes_asyncio."""
