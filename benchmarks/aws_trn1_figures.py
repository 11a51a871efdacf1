"""AWS's published Trn1 inference figures (the Trn1 inference performance page's decoder tables,
transformers-neuronx on trn1.32xlarge, Neuron 2.18, TP=32, FP16 models compiled to BF16 matmuls,
P50), for benchmarks/cost_model_vs_aws.py. Source files, in the aws-neuron-sdk repository:
about-neuron/benchmarks/trn1/latency_data_decoder.csv (batch 1) and throughput_data_decoder.csv.
Llama-3-8B's rows are left out: its weights are stored in int8, which the report does not price."""

SOURCE = ("https://github.com/aws-neuron/aws-neuron-sdk/blob/master/about-neuron/benchmarks/trn1/"
          "{}_data_decoder.csv (transformers-neuronx, Neuron 2.18, P50)")
LATENCY, THROUGHPUT = SOURCE.format("latency"), SOURCE.format("throughput")

_LLAMA2 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
           "max_position_embeddings": 4096, "rope_theta": 10000.0}
# Public config.json values of each model (huggingface.co/<org>/<model>/blob/main/config.json).
MODELS = {
    "Llama-2-7b": dict(_LLAMA2, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32),
    "Llama-2-13b": dict(_LLAMA2, hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                        num_attention_heads=40, num_key_value_heads=40),
    "Llama-2-70b": dict(_LLAMA2, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                        num_attention_heads=64, num_key_value_heads=8),
    "Llama-3-70B": dict(_LLAMA2, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                        num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                        max_position_embeddings=8192, rope_theta=500000.0),
    "Mistral-7B-Instruct-v0.2": {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                                 "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                                 "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                                 "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                                 "sliding_window": None},
    "CodeLlama-13b-hf": dict(_LLAMA2, hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                             num_attention_heads=40, num_key_value_heads=40, vocab_size=32016,
                             max_position_embeddings=16384, rope_theta=1000000.0),
}
# transformers-neuronx as of Neuron 2.18 (its April 2024 sources) computes attention unfused: the
# scores Q.K^T are a tensor in device memory, masked, softmaxed, then multiplied by V. Its flash
# attention kernel came with the June 2024 sources, and only for contexts of 4096 tokens or more.
ATTENTION = "eager"
# (model, batch, input tokens, output tokens, TTFT ms, TPOT ms, source), each row of the two tables.
ROWS = [
    ("Llama-3-70B", 1, 2048, 2048, 547.0, 26.2, LATENCY),
    ("Llama-3-70B", 1, 128, 1024, 53.2, 24.48, LATENCY),
    ("Llama-3-70B", 1, 128, 128, 52.53, 26.48, LATENCY),
    ("Llama-2-7b", 1, 128, 8064, 13.32402229, 6.69956207, LATENCY),
    ("Llama-2-13b", 1, 4096, 4096, 864.1381264, 9.84406471, LATENCY),
    ("Llama-2-13b", 1, 8192, 8192, 2367.928505, 13.40842247, LATENCY),
    ("Llama-2-70b", 1, 128, 128, 53.91026, 25.18129, LATENCY),
    ("Llama-2-70b", 1, 256, 256, 81.882, 25.26712, LATENCY),
    ("Llama-2-70b", 1, 128, 1024, 57.75213, 25.44856, LATENCY),
    ("Llama-2-70b", 1, 1024, 1024, 232.47981, 26.03793, LATENCY),
    ("Llama-2-70b", 1, 1024, 2048, 236.78207, 26.62468, LATENCY),
    ("Llama-2-70b", 1, 2048, 2048, 690.95588, 26.85046, LATENCY),
    ("Mistral-7B-Instruct-v0.2", 1, 8192, 8192, 1322.874308, 9.89246368, LATENCY),
    ("CodeLlama-13b-hf", 1, 4096, 4096, 868.635416, 9.86456871, LATENCY),
    ("CodeLlama-13b-hf", 1, 8192, 8192, 2372.928381, 13.3998394, LATENCY),
    ("Llama-3-70B", 4, 2048, 2048, 1661.12, 32.33, THROUGHPUT),
    ("Llama-3-70B", 4, 128, 1024, 129.86, 28.38, THROUGHPUT),
    ("Llama-3-70B", 4, 128, 128, 130.37, 28.08, THROUGHPUT),
    ("Llama-2-7b", 8, 128, 8064, 66.4024353, 10.09511948, THROUGHPUT),
    ("Llama-2-13b", 8, 4096, 4096, 6668.70475, 19.85741, THROUGHPUT),
    ("Llama-2-13b", 4, 8192, 8192, 4628.44729, 21.09194, THROUGHPUT),
    ("Llama-2-70b", 4, 128, 128, 156.84581, 26.72362, THROUGHPUT),
    ("Llama-2-70b", 4, 256, 256, 270.15853, 26.9084, THROUGHPUT),
    ("Llama-2-70b", 4, 128, 1024, 156.68869, 27.21453, THROUGHPUT),
    ("Llama-2-70b", 4, 1024, 1024, 1478.64008, 28.55039, THROUGHPUT),
    ("Llama-2-70b", 4, 1024, 2048, 1478.84846, 31.67439, THROUGHPUT),
    ("Llama-2-70b", 4, 2048, 2048, 2722.03422, 31.78978, THROUGHPUT),
    ("Mistral-7B-Instruct-v0.2", 8, 8192, 8192, 8614.85291, 15.43713, THROUGHPUT),
    ("CodeLlama-13b-hf", 8, 4096, 4096, 6625.1595, 19.91653, THROUGHPUT),
    ("CodeLlama-13b-hf", 4, 8192, 8192, 4626.17469, 21.09528, THROUGHPUT),
]

# Trn1's published pre-training throughput, from about-neuron/benchmarks/trn1/training_data_decoder.csv
# and its history (NxD Training, BF16 autocast with an FP32 optimizer, AdamW, microbatch 1, 1024
# sequences per step, 32 trn1.32xlarge unless said; the newest figure of each layout; NeMo's rows,
# stochastic rounding on other models, and two rows whose layout needs more nodes than they name,
# are left out): (model, TP, DP, PP, sequence length, sequences per step, sequences/s, source).
TRAINING_SOURCE = ("https://github.com/aws-neuron/aws-neuron-sdk/blob/master/about-neuron/benchmarks/trn1/"
                   "training_data_decoder.csv (NxD Training, Neuron {})")
MODELS["Llama-3.1-8B"] = dict(_LLAMA2, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                              num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                              max_position_embeddings=131072, rope_theta=500000.0)
MODELS["Llama-3.1-70B"] = dict(MODELS["Llama-3-70B"], max_position_embeddings=131072)
TRAINING = [
    ("Llama-3.1-8B", 32, 32, 1, 8192, 1024, 47.95, TRAINING_SOURCE.format("2.24, ZeRO-1")),
    ("Llama-2-7b", 8, 64, 1, 4096, 1024, 95.14, TRAINING_SOURCE.format("2.21, 16 nodes")),
    ("Llama-3.1-70B", 32, 4, 8, 8192, 1024, 7.94, TRAINING_SOURCE.format("2.24")),
    ("Llama-2-70b", 32, 4, 8, 4096, 1024, 14.44, TRAINING_SOURCE.format("2.21")),
    ("Llama-2-70b", 32, 8, 4, 4096, 1024, 17.86, TRAINING_SOURCE.format("2.18")),
    ("Llama-2-13b", 8, 16, 8, 4096, 1024, 80.33, TRAINING_SOURCE.format("2.21")),
    ("Llama-2-13b", 8, 32, 4, 4096, 1024, 87.44, TRAINING_SOURCE.format("2.18")),
]
