"""The pure core of sessionlog: event model, validation, surface fold, projections, repair.

Nothing here does I/O, so the server, the clients and offline tools fold logs with the same code.
"""
