"""The sessionlog service: gRPC transport, use cases, storage, recovery and configuration."""
