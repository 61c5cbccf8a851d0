"""What a run uses, computed and nothing executed: the CUDA matrix."""
