"""NOTES 23: two threads realizing one plan (softmax of different data, same shape), with and without the plan's lock.

  python notes/notes23_threads.py
"""
import contextlib
import threading
import numpy as np
from uopc.kernelize import make_plan
from uopc.tensor import Tensor

xs = [np.random.default_rng(s).standard_normal((256, 1000)).astype(np.float32) for s in range(2)]
want = [np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True) for x in xs]
plan = make_plan([Tensor(xs[0]).softmax(-1).uop], options=Tensor.options())   # the plan every realize below uses
for label, lock in (("no lock (the first realize)", contextlib.nullcontext()), ("the plan's lock", threading.Lock())):
  plan.lock, wrong = lock, []
  def work(k):
    for _ in range(40):
      if not np.allclose(Tensor(xs[k]).softmax(-1).numpy(), want[k], atol=1e-6): wrong.append(k)
  threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
  for t in threads: t.start()
  for t in threads: t.join()
  print(f"{label}: {len(wrong)} wrong results of 80")
