"""The errors uopc raises for a bad argument or shape (catchable as Python's ValueError and as PyTorch's
RuntimeError), and for a device this machine cannot run.

PyTorch raises RuntimeError for shape errors (matmul, reshape, permute, gather, cross_entropy) where NumPy and
uopc raise ValueError; code written against either catches this one.
"""


class UsageError(ValueError, RuntimeError):
  """An argument or a shape a Tensor op cannot take; the message names it."""


class UsageTypeError(UsageError, TypeError):
  """An argument of the wrong type where tinygrad raises ValueError and PyTorch TypeError (a Tensor given as the
  axis of stack): catchable as either, and as UsageError."""


class DeviceUnavailable(RuntimeError):
  """A device this machine cannot run: no OpenCL platform (CL), no NVRTC (CUDA), no GPU, no Oclgrind. The message
  names the machine, what is missing and how to install it; tests skip on it, and a notebook cell that declares the
  device (`%%needs CL`, uopc.notebook) prints it with the output it stored."""
