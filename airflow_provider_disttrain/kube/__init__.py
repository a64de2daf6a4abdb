"""Kubernetes object and quantity helpers, and the typed cluster connection."""
