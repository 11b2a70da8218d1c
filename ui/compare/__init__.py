"""Compare: one request the usual way and sped up, side by side."""
