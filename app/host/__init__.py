"""The engine host: the worker process that runs the engine (messages, child loop, process handle),
its remote stand-in, the reply buffer, and the Qt controller the window talks to."""
