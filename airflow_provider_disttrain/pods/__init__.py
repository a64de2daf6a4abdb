"""The job's pods: their logs, live log streaming, termination messages and metrics."""
