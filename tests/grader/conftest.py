"""The grader's tests share one picture of a grading machine: the grader's own home and caches."""
import os
import pytest


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  """The grader's own home and kernel cache (with something in each), as a grading machine has them."""
  base = tmp_path_factory.mktemp("grader")
  home, cache = base / "home", base / "cache"
  (home / ".ipython" / "profile_default" / "startup").mkdir(parents=True)
  cache.mkdir()
  (cache / "kept.txt").write_text("the grader's cache\n")
  # the assignments' warm caches (grade.seed_cache, made by the grader from the stubs alone) and the kernels the
  # grader compiled from sandboxes' sources (scripts/grader/trusted.py, tests/grader/test_grader_trusted.py) live apart
  return {**os.environ, "HOME": str(home), "UOPC_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1",
          "UOPC_GRADER_SEEDS": str(base / "seeds"), "UOPC_GRADER_KERNELS": str(base / "kernels")}, home, cache
