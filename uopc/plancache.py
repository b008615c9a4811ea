"""The plan cache: (normalized roots, options) -> Plan, least recently used first out.

uopc.kernelize owns the one cache every realize uses (registered with uopc.helpers.cache, so clear_caches() empties
it); this module is the mechanism. Each plan keeps its temporaries, so the cache is bounded by their bytes and by
count: a program of many shapes does not hold memory for every shape it ever ran.
"""
from __future__ import annotations
import contextlib
import threading
from uopc.helpers import getenv


def temp_bytes(plan) -> int:
  """The bytes of a plan's temporaries: (dtype, n) per temporary."""
  return sum(n * d.itemsize for d, n in plan.temps)


class PlanCache:
  """key -> Plan, bounded by the bytes of the plans' temporaries (max_bytes) and by count (max_plans)."""
  def __init__(self, max_bytes: int, max_plans: int):
    self.max_bytes, self.max_plans, self.plans, self.nbytes = max_bytes, max_plans, {}, 0
    self.lock = threading.Lock()   # realizes on several threads share the cache

  @classmethod
  def from_env(cls) -> PlanCache:
    """The limits from UOPC_PLAN_CACHE_MB (default 1024) and UOPC_PLAN_CACHE_PLANS (default 512)."""
    return cls(getenv("UOPC_PLAN_CACHE_MB", 1024) << 20, getenv("UOPC_PLAN_CACHE_PLANS", 512))

  def get(self, key):
    with self.lock:
      if (plan := self.plans.pop(key, None)) is not None: self.plans[key] = plan   # now the most recently used
      return plan

  def put(self, key, plan) -> None:
    with self.lock:
      if (old := self.plans.pop(key, None)) is not None: self.nbytes -= temp_bytes(old)
      self.plans[key] = plan
      self.nbytes += temp_bytes(plan)
      while len(self.plans) > 1 and (self.nbytes > self.max_bytes or len(self.plans) > self.max_plans):
        self.nbytes -= temp_bytes(self.plans.pop(next(iter(self.plans))))

  def clear(self) -> None:
    with self.lock: self.plans.clear(); self.nbytes = 0
  def __len__(self): return len(self.plans)

  @contextlib.contextmanager
  def isolated(self, max_bytes: int | None = None, max_plans: int | None = None):
    """Within the block this cache holds only the plans made in it (under other limits if given); after it, the
    plans and limits from before are back. The same object throughout: whoever holds the cache sees the swap."""
    with self.lock:
      saved = self.plans, self.nbytes, self.max_bytes, self.max_plans
      self.plans, self.nbytes = {}, 0
      self.max_bytes, self.max_plans = max_bytes or self.max_bytes, max_plans or self.max_plans
    try: yield self
    finally:
      with self.lock: self.plans, self.nbytes, self.max_bytes, self.max_plans = saved
