"""Hand-written kernels in the loop IR: FlashAttention for the CPU (scalar, keys in lanes, queries in lanes) and
FlashAttention-2 for GPU devices. Each module builds a loop program; uopc.nn.flash and uopc.nn.attention compile and
call them."""
