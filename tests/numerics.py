"""Numerical references the tests share (tests/ is on sys.path when pytest runs them)."""
import numpy as np


def finite_differences(f, xs: list[np.ndarray], eps: float = 1e-6) -> list[np.ndarray]:
  """d f / d x for each x, by central differences in float64."""
  grads = []
  for k, x in enumerate(xs):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
      plus, minus = [y.copy() for y in xs], [y.copy() for y in xs]
      plus[k][i] += eps; minus[k][i] -= eps
      g[i] = (f(*plus) - f(*minus)) / (2 * eps)
    grads.append(g)
  return grads
