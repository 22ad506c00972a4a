"""Prefect flows of the release pipeline (see flows/README.md)."""
