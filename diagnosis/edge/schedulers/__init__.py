"""Scheduler adapters (the edge): read a cluster's scheduler state and apply changes to it."""
