"""sessionlog's test suite.

Its in-process servers (tests/support/servers.py `ServerThread`) load gRPC in the suite's own
process, so the package sets the gRPC options `serve` sets before any test module imports
gRPC: the servers under test are configured as served ones are (transport/grpc_core.py)."""

from sessionlog_server.transport.grpc_core import apply_server_options

apply_server_options()
