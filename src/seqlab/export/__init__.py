"""Carrying a trained model to its users: quantized (``quantize``)."""
