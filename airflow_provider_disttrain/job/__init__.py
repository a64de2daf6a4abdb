"""The job and one observation of it: the kinds table, its state and conditions, progress, outcome, deadlines."""
