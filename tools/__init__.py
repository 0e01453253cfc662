"""Maintenance scripts for the course (not installed; run from the repository root)."""
