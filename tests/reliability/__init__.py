"""Reliability tests (issue 7): fuzzing through the real server, several instances, soak smoke."""
