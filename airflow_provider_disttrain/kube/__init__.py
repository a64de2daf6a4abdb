"""Kubernetes helpers under every layer: conditions, API resources, quantities, its rules, the connection."""
