"""Generated gRPC stubs of sessionlog.v1 (do not edit; run scripts/gen_proto.py)."""
