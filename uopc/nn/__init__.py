"""Neural-network pieces in the shapes PyTorch users know: attention, layers, the GPT, and their data.

  attention.py  scaled_dot_product_attention: the flash kernels on the CPU, FlashAttention-2 on a GPU device
  flash.py      the vector flash kernels' tiles: heuristic, tuned (BEAM) or given, compiled once per problem
  layers.py     Module, Linear, Embedding, LayerNorm, LayerNorm2d, Dropout; checkpoints as .npz
  conv.py       Conv1d, Conv2d, ConvTranspose2d
  norm.py       BatchNorm1d, BatchNorm2d (running statistics as buffers; train() and eval())
  containers.py Sequential, Flatten, Identity, pools, ReLU-style activations, CrossEntropyLoss, NLLLoss, MSELoss
  init.py       PyTorch's nn.init: uniform_, normal_, kaiming_uniform_, xavier_uniform_, ...
  gpt.py        GPTConfig and GPT (chapter 14)
  train.py      nanoGPT's recipe: presets (chapter, baby), AdamW's groups, clipping, the schedule, Trainer, sampling
  data.py       the character tokenizer and batches of data/shakespeare.txt

`from uopc.nn import Linear` is the name other code uses; the optimizers are uopc.optim.
"""
from uopc.nn.attention import scaled_dot_product_attention
from uopc.nn.layers import (Module, Linear, Embedding, LayerNorm, LayerNorm2d, Dropout, parameter, named_parameters,
                            buffer, named_buffers, save_npz, load_npz)
from uopc.nn.gpt import GPT, GPTConfig, causal_self_attention, causal_mask
from uopc.nn.conv import Conv1d, Conv2d, ConvTranspose2d
from uopc.nn.norm import BatchNorm1d, BatchNorm2d
from uopc.nn.containers import (Sequential, Flatten, Identity, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, ReLU, ReLU6,
                                Sigmoid, Tanh, SiLU, Mish, GELU, LeakyReLU, ELU, Softplus, Hardswish, Hardsigmoid,
                                Softmax, LogSoftmax, CrossEntropyLoss, NLLLoss, MSELoss)
from uopc.nn import init

__all__ = ["scaled_dot_product_attention", "Module", "Linear", "Embedding", "LayerNorm", "LayerNorm2d", "Dropout",
           "parameter", "named_parameters", "buffer", "named_buffers", "save_npz", "load_npz", "GPT", "GPTConfig",
           "causal_self_attention", "causal_mask", "Conv1d", "Conv2d", "ConvTranspose2d", "BatchNorm1d",
           "BatchNorm2d", "Sequential", "Flatten", "Identity", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "ReLU",
           "ReLU6", "Sigmoid", "Tanh", "SiLU", "Mish", "GELU", "LeakyReLU", "ELU", "Softplus", "Hardswish",
           "Hardsigmoid", "Softmax", "LogSoftmax", "init", "CrossEntropyLoss", "NLLLoss", "MSELoss"]
