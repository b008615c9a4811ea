"""helpers.LRU, the bounded dict a plan cache keeps its plans in (issue 18: memory that never came back)."""
import threading
import pytest
from uopc.helpers import LRU

pytestmark = pytest.mark.ch08


def test_keeps_at_most_maxsize_dropping_the_least_recently_used():
  c = LRU(2)
  c["a"], c["b"] = 1, 2
  assert c.get("a") == 1          # "a" is now the most recent
  c["c"] = 3                      # drops "b"
  assert c.keys() == ["a", "c"] and "b" not in c and len(c) == 2
  c["a"] = 10                     # a write is a use too
  c["d"] = 4
  assert c.keys() == ["a", "d"] and c["a"] == 10


def test_get_counts_hits_and_misses_and_membership_is_not_a_use():
  c = LRU(2)
  c["a"], c["b"] = 1, 2
  assert "a" in c and c.keys() == ["a", "b"]
  assert c.get("x", "none") == "none" and c.get("b") == 2
  assert (c.hits, c.misses) == (1, 1) and "1 hits, 1 misses" in repr(c)
  with pytest.raises(KeyError): c["x"]


def test_clear_frees_every_entry():
  c = LRU(4)
  big = bytearray(1 << 20)
  c["plan"] = big
  del big
  c.clear()
  assert len(c) == 0 and c.get("plan") is None


def test_delete_and_bad_sizes():
  c = LRU(1)
  c["a"] = 1
  del c["a"]
  assert len(c) == 0
  for bad in (0, -1, 2.5, None):
    with pytest.raises(ValueError, match="maxsize"): LRU(bad)


def test_shared_between_threads():
  c = LRU(8)
  def work(t: int):
    for i in range(2000):
      c[(t, i % 16)] = i
      c.get((t, (i + 1) % 16))
  threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
  for t in threads: t.start()
  for t in threads: t.join()
  assert len(c) == 8 and len(set(c.keys())) == 8
