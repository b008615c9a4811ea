"""NOTES 44: three values that were silently wrong, each printed next to the right one.

  PYTHONPATH=. python notes/notes44_semantics.py

1. p.grad read after an optimizer's step: a lazy .grad is recomputed from the parameter's buffer, which the step has
   overwritten (PyTorch keeps the gradient it computed: [2, 4]).
2. log_softmax of [1e30, 1e30, -1e30, 0]: with -fassociative-math, gcc turns (x - max) - log(sum) into
   x - (max + log(sum)), and 1e30 + 0.69 rounds to 1e30 (the answer is -0.693 for the two large entries).
3. a <= b written as not(a > b): True when either side is NaN (NumPy: False).
"""
import math
import numpy as np
from uopc.optim import SGD
from uopc.tensor import Tensor

p = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
opt = SGD([p], lr=0.1)
loss = (p * p).sum()
opt.zero_grad(); loss.backward(); opt.step(loss)
print("1. p.grad after the step:", p.grad.numpy(), " expected [2. 4.] (recomputed at the new p: [1.6 3.2])")

x = np.array([1e30, 1e30, -1e30, 0], np.float32)
print("2. log_softmax:", Tensor(x).log_softmax().numpy()[:2], f" expected {-math.log(2):.6f} twice")

a, b = np.array([1.0, np.nan, 2.0]), np.array([1.0, 1.0, np.nan])
print("3. a <= b:", (Tensor(a) <= Tensor(b)).numpy(), " NumPy:", a <= b)
