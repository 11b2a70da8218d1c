"""Developer tools, not part of the product: run from the repository root (`python -m tools.screenshot`).

Here: what the Makefile runs (screenshot, screenshot_set, bench_gui). One-off experiments, each
with the question it answered, are in tools/lab/.
"""
