"""Adapters to managed clusters (kubernetes_asyncio built from each stored kubeconfig)."""
