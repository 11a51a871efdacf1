"""The device spec transformers' testing utilities read (TRANSFORMERS_TEST_DEVICE_SPEC; `make
hf-model-tests` passes it): how its device-generic tests seed, empty the cache of and count neuron
devices. transformers imports it by bare module name, so the make target runs from this folder."""
import torch

DEVICE_NAME = "neuron"
MANUAL_SEED_FN = torch.neuron.manual_seed
EMPTY_CACHE_FN = torch.neuron.empty_cache
DEVICE_COUNT_FN = torch.neuron.device_count
