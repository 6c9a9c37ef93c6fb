"""Recommendation generators with simulated impact (DESIGN.md section 8): one module per generator
(``GENERATOR = Generator(...)``), found by the registry; ``engine.recommend`` runs them all.
See docs/recommendations.md."""
