"""Recommendation generators with simulated impact (docs/recommendations.md): one module per
generator
(``GENERATOR = Generator(...)``), found by the registry; ``engine.recommend`` runs them all.
See docs/recommendations.md."""
