"""Typed domain objects: GPU flavors, clusters, jobs and their lifecycle."""
