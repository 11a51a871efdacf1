// Sparse tensors on neuron (sparse_ops.cpp).
#pragma once

namespace torch_neuronx {

// Registers the host path on the compressed sparse key for every op with a compressed-layout CPU
// kernel that neuron has no kernel of its own for. Called once at module import, after every
// static registration (so the accessors neuron registers keep theirs).
void register_compressed_sparse_ops();

}  // namespace torch_neuronx
