"""The autopilot (docs/autopilot.md): remediation policies and the step after each cycle that
applies what they allow through the recommendation workflow."""
