"""What gpuobs sends out: findings and incidents to Alertmanager, notices to job owners, and the
fairness reports people subscribed to."""
