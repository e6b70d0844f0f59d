"""Per-job parallel planning over heterogeneous GPUs: data-parallel splits, pipelines, hybrids."""
