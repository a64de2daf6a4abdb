"""Pure manifest handling: loading, building from parameters, and validating before submission."""
