"""Tandem's engine: speculative decoding on llama.cpp, with no Qt and no UI.

The engine can be driven from a script, a test, the CLI or the app's worker process.
"""
