"""Sensitivity-aware mixed-precision post-training quantization (the study's Part 1)."""
