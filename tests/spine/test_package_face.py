"""The package's face (issue 47): `from uopc import Tensor, TinyJit, nn, dtypes, no_grad` works, and `import uopc`
alone loads no part of the compiler (the names are imported on first use)."""
import subprocess
import sys
import pytest


def run(code: str) -> str:
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_import_uopc_loads_no_compiler_module():
  loaded = run("import uopc, sys; print(sorted(m for m in sys.modules if m.startswith('uopc.')))")
  assert loaded == "['uopc.helpers']"


def test_the_face_names_what_tinygrad_and_pytorch_users_import():
  out = run("from uopc import Tensor, TinyJit, nn, optim, dtypes, no_grad\n"
            "import uopc.tensor, uopc.jit, uopc.nn, uopc.dtype, uopc.grad_mode\n"
            "print(Tensor is uopc.tensor.Tensor, TinyJit is uopc.jit.TinyJit, nn is uopc.nn,\n"
            "      dtypes is uopc.dtype.dtypes, no_grad is uopc.grad_mode.no_grad, optim.SGD.__name__)\n"
            "print((Tensor([1.0, 2.0]) * 3).numpy().tolist())")
  assert out.splitlines() == ["True True True True True SGD", "[3.0, 6.0]"]


def test_an_unknown_name_is_an_attribute_error():
  import uopc
  with pytest.raises(AttributeError, match="no attribute 'Tensr'"): uopc.Tensr  # noqa: B018
  assert {"Tensor", "TinyJit", "nn", "dtypes", "no_grad"} <= set(dir(uopc))
