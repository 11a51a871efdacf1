"""NKI kernels written for the NeuronCore's shape (128 partitions, PSUM banks, a PE array fed
stationary and moving tiles) — each runs on neuron tensors, on NumPy arrays through
nki.simulate, and under nki.estimate. Shapes need not be multiples of the tile sizes."""
from .attention import flash_attention_fwd
from .matmul import bmm, matmul
from .norms import layernorm, rmsnorm
from .softmax import softmax

__all__ = ["matmul", "bmm", "rmsnorm", "layernorm", "softmax", "flash_attention_fwd"]
