"""The rule that picks the tests CI runs again at a lower x86 level (marker `isa`) and without the device packages
(marker `environment`), tests/conftest.py: a test is marked by the words in its own code and in what of its module
it reaches, never by a comment, a docstring or a test beside it."""
import importlib.util
import textwrap
from pathlib import Path

# tests/conftest.py by its path: the name `conftest` is every folder's (tests/grader/ has one of its own)
_spec = importlib.util.spec_from_file_location("tests_conftest", Path(__file__).resolve().parent / "conftest.py")
rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rules)
ENVIRONMENT_WORDS, ISA_WORDS, code_of_tests = rules.ENVIRONMENT_WORDS, rules.ISA_WORDS, rules.code_of_tests

MODULE = '''
"""A module whose docstring names OpenMP and TinyJit."""
import numpy as np
from uopc.nn import GPT
from needs import needs_openmp   # tests/needs.py: its text names OpenMP
DEVICES = ["CPU", "CL"]

# a comment naming scaled_dot_product_attention and CUDA

def helper(x):
  return GPT(x)

def deeper(x):
  return helper(x)

@pytest.fixture
def on_devices():
  return DEVICES

def test_plain():
  """TinyJit in a docstring."""
  assert np.zeros(1).sum() == 0   # OMP_NUM_THREADS in a comment

def test_through_a_helper():
  deeper(1)

def test_through_a_fixture(on_devices):
  assert on_devices

@pytest.mark.parametrize("device", DEVICES)
def test_through_a_parameter(device):
  assert device

def test_through_a_helper_module():
  needs_openmp()

class TestGroup:
  def test_in_a_class(self):
    assert "TinyJit"
'''


def marked(tmp_path, source: str) -> dict[str, set[str]]:
  path = tmp_path / "test_example.py"
  path.write_text(textwrap.dedent(source))
  return {name: {m for m, words in (("isa", ISA_WORDS), ("environment", ENVIRONMENT_WORDS)) if words.search(code)}
          for name, code in code_of_tests(path).items()}


def test_a_test_is_marked_by_what_its_code_reaches(tmp_path):
  assert marked(tmp_path, MODULE) == {
    "test_plain": set(),                                  # docstrings and comments, its own and the module's
    "test_through_a_helper": {"isa"},                     # deeper -> helper -> GPT, imported from uopc.nn
    "test_through_a_fixture": {"environment"},            # the fixture by its argument's name -> DEVICES
    "test_through_a_parameter": {"environment"},          # its decorator -> DEVICES
    "test_through_a_helper_module": {"environment"},      # tests/needs.py's text
    "TestGroup": {"isa"},                                 # a class of tests: its code
  }


def test_what_reaches_every_test_marks_every_test(tmp_path):
  every = marked(tmp_path, '''
    import pytest
    @pytest.fixture(autouse=True)
    def threads(monkeypatch):
      monkeypatch.setenv("OMP_NUM_THREADS", "2")
    def test_one(): pass
    def test_two(): pass
    ''')
  assert every == {"test_one": {"environment"}, "test_two": {"environment"}}
  assert marked(tmp_path, '''
    import pytest
    pytestmark = pytest.mark.skipif(not hasattr(pytest, "x"), reason="needs the CL device")
    def test_one(): pass
    ''') == {"test_one": {"environment"}}
