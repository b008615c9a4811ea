"""The error uopc raises for a bad argument or shape: catchable as Python's ValueError and as PyTorch's RuntimeError.

PyTorch raises RuntimeError for shape errors (matmul, reshape, permute, gather, cross_entropy) where NumPy and
uopc raise ValueError; code written against either catches this one.
"""


class UsageError(ValueError, RuntimeError):
  """An argument or a shape a Tensor op cannot take; the message names it."""
