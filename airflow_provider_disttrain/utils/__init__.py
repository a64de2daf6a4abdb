"""The clock and the telemetry (metrics and spans) every layer uses."""
