"""uopc: a small tensor compiler. Tensor -> UOps -> kernels -> loops -> C -> cffi -> NumPy."""
__version__ = "0.1.0"
