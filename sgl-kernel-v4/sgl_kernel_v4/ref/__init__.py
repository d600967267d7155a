"""Torch reference implementations of the sgl-kernel-v4 ops (CPU path and test oracles)."""
