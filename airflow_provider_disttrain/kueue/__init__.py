"""Kueue's side of a job: its hold on a job, admission, eviction history and queue position."""
