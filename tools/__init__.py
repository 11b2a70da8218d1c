"""Developer tools, not part of the product: run from the repository root (`python -m tools.screenshot`)."""
