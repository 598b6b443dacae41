"""Placeholder: see the open issue that builds this package."""
