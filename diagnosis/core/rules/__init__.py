"""Diagnosis rules: one module per rule (``RULE = Rule(...)``), found by the registry."""
