"""Neuron Observer for the neuron device: `nobs` (cli.py) reads the state every process using a
device publishes (state.py, written by the runtime's monitor: runtime/include/neuronrt/health.h),
runs golden programs per core (golden.py), and serves it over HTTP with Prometheus metrics
(server.py)."""
