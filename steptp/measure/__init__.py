"""Verification (and, later, measurement) of candidate kernels against references."""

from .verify import EXACTNESS, TOLERANCES, SeedResult, VerifyResult, random_inputs, tolerance, verify

__all__ = ["EXACTNESS", "TOLERANCES", "SeedResult", "VerifyResult", "random_inputs", "tolerance",
           "verify"]
