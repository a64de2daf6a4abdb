"""The job and one observation of it: its kind, state, outcome and deadlines."""
