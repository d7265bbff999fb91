"""DiffMJX: correct and informative gradients of MuJoCo XLA simulations."""
