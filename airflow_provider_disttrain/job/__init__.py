"""The job and one observation of it: kinds, state, a view of one look, progress, outcome, deadlines, the step."""
