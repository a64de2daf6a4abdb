"""OpenLineage for a training task: the facts read from the job and the run facets."""
