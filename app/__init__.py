"""Tandem's composition root: entry points, paths, settings, the worker that runs the engine."""
