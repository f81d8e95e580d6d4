"""sessionlog: the client library, the CLI, and the pure core shared with the server."""

__version__ = "0.1.0"
