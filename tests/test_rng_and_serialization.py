"""Random numbers (reproducible, generator state and offsets) and saving/loading neuron tensors."""
import io

import torch


def test_rng_reproducible_and_state_layout():
    torch.neuron.manual_seed(1234)
    a = torch.randn(100, device="neuron")
    b = torch.rand(10, device="neuron")
    d = torch.nn.functional.dropout(torch.ones(50, device="neuron"), 0.5)
    torch.neuron.manual_seed(1234)
    torch.testing.assert_close(torch.randn(100, device="neuron").cpu(), a.cpu())
    torch.testing.assert_close(torch.rand(10, device="neuron").cpu(), b.cpu())
    torch.testing.assert_close(torch.nn.functional.dropout(torch.ones(50, device="neuron"), 0.5).cpu(), d.cpu())
    assert not torch.equal(a.cpu(), torch.randn(100, device="neuron").cpu())
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    seed, offset = state.view(torch.int64).tolist()
    assert seed == 1234 and offset > 0  # seed then offset: the layout DTensor edits
    x1 = torch.randint(0, 100, (20,), device="neuron")
    torch.neuron.set_rng_state(state)
    torch.testing.assert_close(torch.randint(0, 100, (20,), device="neuron").cpu(), x1.cpu())
    p = torch.multinomial(torch.ones(10, device="neuron"), 5)
    assert p.device.type == "neuron" and len(set(torch.randperm(10, device="neuron").tolist())) == 10
    assert torch.neuron.initial_seed() == 1234


def test_generator_offset_api_and_default_generators():
    """torch.neuron.default_generators holds one generator per device (as torch.cuda's does once
    initialised), and get_offset/set_offset move within the seed's stream: going back replays."""
    gens = torch.neuron.default_generators
    assert len(gens) == torch.neuron.device_count() and gens[1].device == torch.device("neuron", 1)
    g = gens[0]
    torch.neuron.manual_seed(5)
    assert g.get_offset() == 0
    a = torch.randn(64, device="neuron")
    after = g.get_offset()
    assert after > 0
    g.set_offset(0)
    torch.testing.assert_close(torch.randn(64, device="neuron").cpu(), a.cpu(), rtol=0, atol=0)
    assert g.get_offset() == after
    own = torch.Generator("neuron").manual_seed(5)
    own.set_offset(after)
    assert own.get_offset() == after and own.initial_seed() == 5
    assert not torch.equal(torch.randn(64, device="neuron", generator=own).cpu(), a.cpu())


def test_save_and_load_round_trip(tmp_path):
    sd = {"w": torch.randn(3, 4, device="neuron"), "i": torch.arange(5, device="neuron")}
    path = tmp_path / "t.pt"
    torch.save(sd, path)
    cpu = torch.load(path, map_location="cpu")
    assert cpu["w"].device.type == "cpu"
    torch.testing.assert_close(cpu["w"], sd["w"].cpu())
    back = torch.load(path)
    assert back["w"].device == torch.device("neuron:0")
    on = torch.load(path, map_location="neuron")
    torch.testing.assert_close(on["i"].cpu(), torch.arange(5))
    buf = io.BytesIO()
    torch.save(torch.nn.Linear(2, 2).to("neuron").state_dict(), buf)
    buf.seek(0)
    assert torch.load(buf, map_location="neuron")["weight"].is_neuron


def test_backend_metadata_is_kept_through_save_load_and_detach(tmp_path):
    from torch._utils import get_tensor_metadata, set_tensor_metadata

    t = torch.randn(3, 3, device="neuron")
    assert get_tensor_metadata(t) == {}
    flags = {"packed": True, "pinned_layout": True}
    set_tensor_metadata(t, flags)
    assert get_tensor_metadata(t) == flags
    d = t.detach()
    set_tensor_metadata(t, {"packed": False})  # False clears a flag; the detached alias keeps its own
    assert get_tensor_metadata(t) == {"pinned_layout": True} and get_tensor_metadata(d) == flags
    torch.save(d, tmp_path / "t.pt")
    back = torch.load(tmp_path / "t.pt")
    assert back.is_neuron and get_tensor_metadata(back) == flags
    torch.testing.assert_close(back.cpu(), t.cpu())
    assert get_tensor_metadata(torch.load(tmp_path / "t.pt", map_location="cpu")) == {}  # the CPU has none
