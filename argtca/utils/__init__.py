"""Low-level helpers every package may use (they import nothing else from argtca)."""
