"""Lowerings beyond the book's spine: each turns a kernel's tensor body into loops of another shape.

  online.py     the online softmax: the kernelizer's fusion of its groups, and their one-pass lowering (ch. 11)
  gemm_vec.py   VectorOpt's packed, vector-tiled matmul
  vector_loops.py  VectorOpt's other float32 kernels (elementwise, row and column reductions) with an axis as lanes
  vector.py     vector dtypes in C (GCC vector extensions): butterflies, trees, typedefs
  tc.py         TC=1: matmuls as warp tiles around a WMMA op
  wmma.py       tensor-core fragment layouts (mma.sync m16n8k16), emulated lane by lane off a GPU
  localtile.py  matmuls from local-memory tiles and register tiles (TiledOpt)
  gpudims.py    launch axes of GPU kernels (grid, block) and their traffic counts
"""
