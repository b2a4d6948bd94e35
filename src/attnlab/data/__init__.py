"""Tasks and their data: reading and checking splits, tokenization, the synthetic tasks with their
planted ground truth, the hub, and the attribution dump format."""
