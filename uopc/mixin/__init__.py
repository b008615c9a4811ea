"""The Tensor's methods by kind, each layer built on the one before it: elementwise math (and trig: the trigonometric
and hyperbolic functions), movement (views, shapes, joining), reductions (and matmul), indexing (NumPy's indexing,
gather, one-hot), functional (activations, losses, random numbers), windows (convolution, pooling, interpolate) and
compose (einsum, sort, cumulative ops, scatter, attention). uopc.tensor composes them into Tensor.

No mixin names the class that composes it: each opens with the primitives it needs ("the composing class
provides", stubs that raise NotImplementedError), as tinygrad's mixins do, and its methods return Self, the
composing class. So the import arrows run one way: uopc.tensor imports the mixins, never the reverse."""
