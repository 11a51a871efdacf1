"""`vllm serve` on neuron: vLLM's OpenAI-compatible server runs a checkpoint on the neuron device
(torch_neuronx's vLLM platform plugin is picked up by itself), queried here with the `openai`
client: a completion, then a streamed chat. The model is untrained (its text is noise).
`python examples/vllm_serve.py`"""
import os
import signal
import subprocess
import sys
import tempfile
import time

import openai
import transformers

from _tiny import tiny_llama_checkpoint

PORT = 18321

with tempfile.TemporaryDirectory() as work:
    path = tiny_llama_checkpoint(work)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    tokenizer.save_pretrained(path)
    # A small KV cache (--kv-cache-memory-bytes) keeps this quick; without it vLLM sizes the cache
    # from --gpu-memory-utilization, bounded by the host's free memory on the software NeuronCore.
    server = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "vllm"), "serve", path, "--host", "127.0.0.1",
         "--port", str(PORT), "--served-model-name", "tiny-llama", "--max-model-len", "128",
         "--kv-cache-memory-bytes", str(64 << 20), "--enforce-eager"],
        cwd=work, start_new_session=True)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key="none")
        deadline = time.monotonic() + 180
        while True:
            try:
                client.models.list()
                break
            except openai.APIConnectionError:
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit("vllm serve did not start")
                time.sleep(0.5)
        completion = client.completions.create(model="tiny-llama", prompt="To be, or not", max_tokens=16,
                                               temperature=0)
        print("completion:", repr(completion.choices[0].text))
        stream = client.chat.completions.create(model="tiny-llama", max_tokens=16, stream=True,
                                                messages=[{"role": "user", "content": "It is a truth"}])
        print("chat:", repr("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)))
        print("served by vLLM on neuron")
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
