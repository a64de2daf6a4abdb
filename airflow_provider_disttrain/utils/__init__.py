"""The clock, the telemetry (metrics and spans) and the bounded waits (``timeouts``) every layer uses."""
