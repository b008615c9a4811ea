"""Tensor-core fragments (uopc.codegen.wmma): the lane layouts are exact, the emulation equals NumPy, a wrong lane
mapping gives wrong numbers, and the CUDA the layouts print is the layouts."""
import dataclasses
import re
import numpy as np
import pytest
from uopc.codegen.wmma import (M16N8K16, M16N8K8_TF32, SHAPES, affine, check_layout, from_fragments, mma,
                               mma_tile_kernel, ptx_mma, to_fragments)

pytestmark = pytest.mark.ch13
rng = np.random.default_rng(0)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_every_element_is_held_by_exactly_one_lane_register(shape):
  for op in (shape.a, shape.b, shape.c): check_layout(op)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_fragments_round_trip(shape):
  tile = rng.standard_normal((shape.a.rows, shape.a.cols)).astype(np.float32)
  np.testing.assert_array_equal(from_fragments(to_fragments(tile, shape.a), shape.a), tile)


@pytest.mark.parametrize("shape,dtype", [(M16N8K16, np.float16), (M16N8K8_TF32, np.float32)], ids=["f16", "tf32"])
def test_the_emulated_mma_is_a_matmul_of_the_fragments(shape, dtype):
  A = rng.standard_normal((shape.m, shape.k)).astype(dtype)
  B = rng.standard_normal((shape.k, shape.n)).astype(dtype)
  C = rng.standard_normal((shape.m, shape.n)).astype(np.float32)
  d = mma(shape, to_fragments(A, shape.a), to_fragments(B, shape.b), to_fragments(C, shape.c))
  want = A.astype(np.float64) @ B.astype(np.float64) + C
  np.testing.assert_allclose(from_fragments(d, shape.c), want, rtol=1e-5, atol=1e-5)


def test_a_wrong_lane_mapping_gives_wrong_numbers():
  """Swap the roles of the lane's group and place in A: still a bijection, so nothing fails loudly; only values do."""
  wrong_a = dataclasses.replace(M16N8K16.a, where=lambda l, i: M16N8K16.a.where((l % 4) * 8 + l // 4, i))
  check_layout(wrong_a)
  A = rng.standard_normal((16, 16)).astype(np.float16)
  B = rng.standard_normal((16, 8)).astype(np.float16)
  zero = np.zeros((32, 4), np.float32)
  right = from_fragments(mma(M16N8K16, to_fragments(A, M16N8K16.a), to_fragments(B, M16N8K16.b), zero), M16N8K16.c)
  # a kernel that loads A by the wrong table hands the hardware (here: its emulation) misplaced elements
  misloaded = to_fragments(A, wrong_a)
  wrong = from_fragments(mma(M16N8K16, misloaded, to_fragments(B, M16N8K16.b), zero), M16N8K16.c)
  np.testing.assert_allclose(right, A.astype(np.float32) @ B.astype(np.float32), rtol=1e-3, atol=1e-3)
  assert np.abs(wrong - right).max() > 0.1


def test_layouts_are_affine_in_group_and_place():
  assert affine(M16N8K16.a, 2, 0) == (1, 0, 8)     # a2 sits 8 rows below a0: row g + 8
  assert affine(M16N8K16.b, 3, 0) == (0, 2, 9)     # b3: row 2t + 1 + 8


def test_the_cuda_kernel_prints_the_table():
  src = mma_tile_kernel()
  assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}" in src
  assert len(re.findall(r"a\[\d\] = ", src)) == 4 and len(re.findall(r"b\[\d\] = ", src)) == 2
  assert "D[(g*1+t*0+8)*8+(g*0+t*2+1)] = d[3];" in src       # c3: row g + 8, column 2t + 1
  with pytest.raises(ValueError, match="takes"): ptx_mma(M16N8K16, "tf32", [], [], [], [])
