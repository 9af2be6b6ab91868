"""GPU destinations from Python (issue 16): `qload.load(device="cuda:N")`, `qload.stream` onto a GPU and
`safe_open(device="cuda:0")` hand back CUDA tensors holding exactly the bytes a CPU load holds, and
safetensors' own `safe_open(device="cuda:0")` agrees. Skipped, never passed, where torch sees no CUDA
device or this qload was built without CUDA (CI's machines): it needs a GPU machine with this package
built there."""
import pytest
import torch

import qload

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: GPU destinations need a GPU")


@pytest.fixture
def llama(tmp_path, qload_cli):
    import subprocess

    out = tmp_path / "m"
    subprocess.run([qload_cli, "synth", str(out), "--layers", "2", "--hidden", "256", "--intermediate", "512",
                    "--vocab", "300", "--heads", "4", "--kv-heads", "2", "--shards", "2"],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def _skip_if_built_without_cuda(error):
    """A qload built without CUDA is skipped; any other refusal is a failure of the test."""
    if "built without CUDA" not in str(error):
        raise error
    pytest.skip(f"this qload cannot load onto a GPU: {error}")


def _load_or_skip(path, **kwargs):
    try:
        return qload.load(path, **kwargs)
    except qload.UnsupportedError as e:
        _skip_if_built_without_cuda(e)


def test_load_to_a_gpu_gives_the_cpu_bytes_in_cuda_tensors(llama):
    cpu = qload.load(llama)
    gpu = _load_or_skip(llama, device="cuda:0")
    assert gpu.keys() == cpu.keys()
    for name, t in gpu.items():
        assert t.device == torch.device("cuda", 0), name
        assert t.dtype == cpu[name].dtype and t.shape == cpu[name].shape, name
        assert torch.equal(t.cpu(), cpu[name]), name
    torch.cuda.synchronize()


def test_stream_to_a_gpu_hands_out_each_tensor_once(llama):
    cpu = qload.load(llama)
    try:
        # The CUDA tensors themselves, held past the end of the stream and its load: each keeps
        # qload's device arena alive.
        seen = dict(qload.stream(llama, device="cuda:0"))
    except qload.UnsupportedError as e:
        _skip_if_built_without_cuda(e)
    assert seen.keys() == cpu.keys()
    assert all(t.device == torch.device("cuda", 0) for t in seen.values())
    assert all(torch.equal(seen[n].cpu(), cpu[n]) for n in cpu)


def test_safe_open_on_a_gpu_agrees_with_safetensors(llama):
    from safetensors import safe_open as st_safe_open

    shard = sorted(llama.glob("*.safetensors"))[0]
    with qload.safe_open(shard, framework="pt", device="cuda:0") as ours, \
            st_safe_open(str(shard), framework="pt", device="cuda:0") as theirs:
        assert sorted(ours.keys()) == sorted(theirs.keys())
        for name in theirs.keys():
            a, b = ours.get_tensor(name), theirs.get_tensor(name)
            assert a.is_cuda and b.is_cuda, name
            assert torch.equal(a, b), name
            assert torch.equal(ours.get_slice(name)[1:3], theirs.get_slice(name)[1:3]), name
