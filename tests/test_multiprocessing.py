"""Neuron tensors across processes (torch.multiprocessing, DataLoader workers, mp.spawn), shared as
CUDA shares device tensors: the same storage, writes visible both ways, the sender's memory kept
while a receiver holds it. Each scenario is a script run in a fresh interpreter with a deadline:
a hang fails the test instead of stopping the suite."""
import subprocess
import sys
import textwrap

PRELUDE = """
import sys, torch, torch.multiprocessing as mp
import torch_neuronx.multiprocessing as nmp
ctx = mp.get_context("spawn")
"""


def run_script(tmp_path, body: str, timeout: int = 180) -> list:
    script = tmp_path / "scenario.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout.strip().splitlines()


def test_a_queue_shares_the_storage_and_writes_are_visible_both_ways(tmp_path):
    out = run_script(tmp_path, """
        def child(q, back):
            t, p = q.get()
            back.put((str(t.device), t.cpu().tolist(), type(p).__name__, p.requires_grad))
            t.add_(100)                 # written here, seen by the parent
            torch.neuron.synchronize()
            back.put("written")
            q.get()                     # the parent wrote too
            back.put(t.cpu().tolist())

        if __name__ == "__main__":
            q, back = ctx.Queue(), ctx.Queue()
            x = torch.arange(12.0, device="neuron:1").view(3, 4)[1:, 1:3]  # a strided view, offset storage
            p = torch.nn.Parameter(torch.ones(2, device="neuron"))
            proc = ctx.Process(target=child, args=(q, back)); proc.start()
            q.put((x, p))
            print(back.get(timeout=60))
            assert back.get(timeout=60) == "written"
            print(x.cpu().tolist())
            x.mul_(-1); torch.neuron.synchronize()
            q.put(None)
            print(back.get(timeout=60))
            proc.join(60)
            print(proc.exitcode, nmp.shared_blocks())  # the child's exit let go of both storages
        """)
    assert out == ["('neuron:1', [[5.0, 6.0], [9.0, 10.0]], 'Parameter', True)",
                   "[[105.0, 106.0], [109.0, 110.0]]",
                   "[[-105.0, -106.0], [-109.0, -110.0]]",
                   "0 0"]


def test_the_sender_keeps_the_memory_while_a_receiver_holds_it(tmp_path):
    out = run_script(tmp_path, """
        def child(q, back):
            t = q.get()
            back.put("got")
            q.get()  # meanwhile the sender dropped its tensor and allocated and wrote fresh ones
            back.put(t.sum().item())

        if __name__ == "__main__":
            q, back = ctx.Queue(), ctx.Queue()
            proc = ctx.Process(target=child, args=(q, back)); proc.start()
            x = torch.full((1 << 18,), 2.0, device="neuron")
            q.put(x)
            assert back.get(timeout=60) == "got"
            del x
            others = [torch.full((1 << 18,), -1.0, device="neuron") for _ in range(8)]  # same size: reuse if freed
            torch.neuron.synchronize()
            print(nmp.shared_blocks())
            q.put(None)
            print(back.get(timeout=60))
            proc.join(60)
            print(nmp.shared_blocks())
        """)
    assert out == ["1", str(2.0 * (1 << 18)), "0"]


def test_dataloader_spawn_workers_return_neuron_tensors(tmp_path):
    out = run_script(tmp_path, """
        from torch.utils.data import DataLoader, Dataset

        class Squares(Dataset):
            def __init__(self, device): self.device = device
            def __len__(self): return 10
            def __getitem__(self, i): return torch.arange(4.0, device=self.device) * i, i

        if __name__ == "__main__":
            got = [(x.device.type, x.cpu(), i) for x, i in DataLoader(
                Squares("neuron"), batch_size=3, num_workers=2, multiprocessing_context="spawn", timeout=60)]
            want = [(x, i) for x, i in DataLoader(Squares("cpu"), batch_size=3)]
            assert [d for d, _, _ in got] == ["neuron"] * 4
            for (_, x, i), (wx, wi) in zip(got, want):
                torch.testing.assert_close(x, wx); torch.testing.assert_close(i, wi)
            print("ok")
        """)
    assert out == ["ok"]


def test_mp_spawn_takes_neuron_tensor_arguments(tmp_path):
    out = run_script(tmp_path, """
        def fn(rank, t, q):
            q.put((rank, str(t.device), t.sum().item()))

        if __name__ == "__main__":
            q = ctx.SimpleQueue()
            mp.spawn(fn, args=(torch.arange(5.0, device="neuron:1"), q), nprocs=2)
            print(sorted([q.get(), q.get()]))
        """)
    assert out == ["[(0, 'neuron:1', 10.0), (1, 'neuron:1', 10.0)]"]


def test_what_cannot_be_shared_raises_in_the_sender(tmp_path):
    out = run_script(tmp_path, """
        from multiprocessing.reduction import ForkingPickler
        for make in (lambda: torch.ones(2, device="neuron", requires_grad=True) * 2,
                     lambda: torch.ones(2, 2).to_sparse().to("neuron")):
            try:
                ForkingPickler.dumps(make())
                print("shared")
            except RuntimeError as e:
                print(str(e).split(",")[0].split(";")[0])
        print(ForkingPickler.loads(ForkingPickler.dumps(torch.arange(3))).tolist())  # CPU: PyTorch's own
        """)
    assert out == ["Cowardly refusing to serialize non-leaf tensor which requires_grad",
                   "neuron: a torch.sparse_coo neuron tensor cannot be shared with another process",
                   "[0, 1, 2]"]
