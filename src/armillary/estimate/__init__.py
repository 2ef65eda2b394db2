"""Analytical estimates: one training step or static inference batch from specifications to typed results
(`estimate.run.estimate_run`; the public call is `armillary.run_estimate`)."""
