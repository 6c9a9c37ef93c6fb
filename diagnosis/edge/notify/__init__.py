"""Outbound notifications: gpuobs's findings and incidents to the engines that page people."""
