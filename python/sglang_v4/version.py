"""sglang-v4: a serving runtime for DeepSeek-V4-architecture models."""

__version__ = "0.1.0"
