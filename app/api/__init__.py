"""The OpenAI-compatible HTTP API: the server (`tandem serve`, also the window's serve toggle) and
the client (`generate --remote`, the window's remote engine)."""
