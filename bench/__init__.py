"""sessionlog benchmarks: `python -m bench` runs the side-by-side comparison (see bench/README.md)."""
