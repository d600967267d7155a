"""Sampling: parameters, batched sampler, stop checks."""

from sglang_v4.sampling.sampling_params import SamplingParams

__all__ = ["SamplingParams"]
