// The fused LSTM / GRU cells. ATen's RNN code calls these on every accelerator (CUDA, XPU,
// PrivateUse1) and has no CPU kernel for them, so nn.LSTM / nn.GRU / nn.LSTMCell / nn.GRUCell need
// them on neuron. Each is a short composition of neuron ops (every one asynchronous and counted);
// the workspace keeps the activated gates so the backward needs no recomputation, as CUDA's does.
// Gate order is PyTorch's: LSTM i, f, g, o; GRU r, z, n.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <tuple>

#include "pipeline/op_record.h"

namespace torch_neuronx {
namespace {

at::Tensor with_biases(const at::Tensor& gates, const std::optional<at::Tensor>& a,
                       const std::optional<at::Tensor>& b) {
  at::Tensor g = gates;
  if (a.has_value() && a->defined()) g = g + *a;
  if (b.has_value() && b->defined()) g = g + *b;
  return g;
}

// d sigmoid(x) / dx from y = sigmoid(x), and d tanh(x) / dx from y = tanh(x).
at::Tensor dsigmoid(const at::Tensor& y) { return y * (1 - y); }
at::Tensor dtanh(const at::Tensor& y) { return 1 - y * y; }

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                         const at::Tensor& cx,
                                                         const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes() && input_gates.size(1) == 4 * cx.size(1),
              "_thnn_fused_lstm_cell: gates of shape ", input_gates.sizes(), " and ", hidden_gates.sizes(),
              " do not fit a cell state of shape ", cx.sizes());
  auto gates = with_biases(input_gates + hidden_gates, input_bias, hidden_bias).chunk(4, 1);
  at::Tensor i = at::sigmoid(gates[0]), f = at::sigmoid(gates[1]), g = at::tanh(gates[2]), o = at::sigmoid(gates[3]);
  at::Tensor cy = f * cx + i * g;
  at::Tensor hy = o * at::tanh(cy);
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                  const std::optional<at::Tensor>& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
  auto w = workspace.chunk(4, 1);
  const at::Tensor &i = w[0], &f = w[1], &g = w[2], &o = w[3];
  const at::Tensor tcy = at::tanh(cy);
  const bool has_hy = grad_hy.has_value() && grad_hy->defined();
  const bool has_cy = grad_cy.has_value() && grad_cy->defined();
  at::Tensor ghy = has_hy ? *grad_hy : at::zeros_like(cy);
  at::Tensor gcy = ghy * o * dtanh(tcy);
  if (has_cy) gcy = gcy + *grad_cy;
  at::Tensor grad_gates =
      at::cat({gcy * g * dsigmoid(i), gcy * cx * dsigmoid(f), gcy * i * dtanh(g), ghy * tcy * dsigmoid(o)}, 1);
  at::Tensor grad_cx = gcy * f;
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes() && input_gates.size(1) == 3 * hx.size(1),
              "_thnn_fused_gru_cell: gates of shape ", input_gates.sizes(), " and ", hidden_gates.sizes(),
              " do not fit a hidden state of shape ", hx.sizes());
  auto ig = with_biases(input_gates, input_bias, std::nullopt).chunk(3, 1);
  auto hg = with_biases(hidden_gates, hidden_bias, std::nullopt).chunk(3, 1);
  at::Tensor r = at::sigmoid(ig[0] + hg[0]), z = at::sigmoid(ig[1] + hg[1]);
  at::Tensor n = at::tanh(ig[2] + r * hg[2]);
  at::Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hg[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(const at::Tensor& grad_hy,
                                                                                         const at::Tensor& workspace,
                                                                                         bool has_bias) {
  auto w = workspace.chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  at::Tensor grad_hx = grad_hy * z;
  at::Tensor dn = grad_hy * (1 - z) * dtanh(n);
  at::Tensor dz = grad_hy * (hx - n) * dsigmoid(z);
  at::Tensor dr = dn * hn * dsigmoid(r);
  at::Tensor grad_input_gates = at::cat({dr, dz, dn}, 1);
  at::Tensor grad_hidden_gates = at::cat({dr, dz, dn * r}, 1);
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

const bool described = [] {
  for (const char* op : {"aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl",
                         "aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell_backward"}) {
    typed_op(op, "a composition of neuron ops (rnn_ops.cpp), each counted on its own");
  }
  return true;
}();

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gru_cell_backward));
}

}  // namespace torch_neuronx
