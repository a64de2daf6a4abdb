"""Why a job failed: diagnostics, the failure classes, controller refusals and the retry policy."""
