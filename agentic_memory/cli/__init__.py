"""amem."""
