"""The Tensor's methods by kind: elementwise math, movement (views and shapes), and functional (reductions,
activations, losses, random numbers). uopc.tensor composes them into Tensor."""
