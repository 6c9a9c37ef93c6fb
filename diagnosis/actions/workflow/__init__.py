"""The recommendation workflow (docs/recommendations.md): proposals from the cycle, people's steps,
the apply, impact estimates, verification and rollback. ``base`` holds the shared vocabulary."""
