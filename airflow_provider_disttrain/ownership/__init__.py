"""Which job is whose: identity, the labels and names, deployments, and the orphan cleanup's judgement."""
