"""Neural-network pieces in the shapes PyTorch users know: attention, layers, the GPT, and their data.

  attention.py  scaled_dot_product_attention: the flash kernels on the CPU, FlashAttention-2 on a GPU device
  flash.py      the vector flash kernels' tiles: heuristic, tuned (BEAM) or given, compiled once per problem
  layers.py     Module, Linear, Embedding, LayerNorm, LayerNorm2d, Dropout; checkpoints as .npz
  gpt.py        GPTConfig and GPT (chapter 14)
  train.py      nanoGPT's recipe: presets (chapter, baby), AdamW's groups, clipping, the schedule, Trainer, sampling
  data.py       the character tokenizer and batches of data/shakespeare.txt

`from uopc.nn import Linear` is the name other code uses; the optimizers are uopc.optim.
"""
from uopc.nn.attention import scaled_dot_product_attention
from uopc.nn.layers import (Module, Linear, Embedding, LayerNorm, LayerNorm2d, Dropout, parameter, named_parameters,
                            save_npz, load_npz)
from uopc.nn.gpt import GPT, GPTConfig, causal_self_attention, causal_mask

__all__ = ["scaled_dot_product_attention", "Module", "Linear", "Embedding", "LayerNorm", "LayerNorm2d", "Dropout",
           "parameter", "named_parameters", "save_npz", "load_npz", "GPT", "GPTConfig", "causal_self_attention",
           "causal_mask"]
