"""qload.load_into into torch tensors a server already allocated, on the CPU and on a GPU: whole
tensors, floats converted, q/k/v rows fused into one parameter, a rank's columns of o_proj into
its columns of a wider parameter (rows a pitch apart), each equal to a plain CPU load and every
element around them untouched. The CUDA case is skipped, never passed, where torch sees no CUDA
device or this qload was built without CUDA (CI's machines): it needs a GPU machine with this
package built there; the CPU case runs the same checks everywhere."""
import os
import subprocess

import pytest
import torch

import qload

DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device: load_into a GPU's memory needs a GPU"))]
MARK = 7.0  # what every element the load must not write holds


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    out = tmp_path_factory.mktemp("m") / "m"
    subprocess.run([os.environ["QLOAD_TEST_CLI"], "synth", str(out), "--layers", "2", "--hidden", "256", "--intermediate", "512",
                    "--vocab", "300", "--heads", "4", "--kv-heads", "2", "--shards", "2"],
                   check=True, stdout=subprocess.DEVNULL)
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_load_into_a_servers_tensors_equals_a_plain_load_and_writes_nothing_else(llama, device):
    cpu = qload.load(llama)
    p = "model.layers.0.self_attn."
    q, k, v, o = (cpu[p + f"{n}_proj.weight"] for n in "qkvo")
    embed, norm = cpu["model.embed_tokens.weight"], cpu["model.norm.weight"]
    qkv = torch.full((q.shape[0] + k.shape[0] + v.shape[0], q.shape[1]), MARK, dtype=torch.bfloat16, device=device)
    wide = torch.full((o.shape[0], o.shape[1] // 2 + 8), MARK, dtype=torch.bfloat16, device=device)
    embed_to = torch.full(embed.shape, MARK, dtype=torch.bfloat16, device=device)
    norm_f32 = torch.full(norm.shape, MARK, dtype=torch.float32, device=device)
    half = o.shape[1] // 2
    try:
        report = qload.load_into(llama, {
            p + "q_proj.weight": qkv[:q.shape[0]],
            p + "k_proj.weight": qkv[q.shape[0]:q.shape[0] + k.shape[0]],
            p + "v_proj.weight": qkv[q.shape[0] + k.shape[0]:],
            p + "o_proj.weight": (wide[:, 4:4 + half], (1, half, o.shape[1])),  # rank 1's columns
            "model.embed_tokens.weight": embed_to,
            "model.norm.weight": norm_f32,
        }, device=device)
    except qload.UnsupportedError as e:  # a build without CUDA; any other refusal fails the test
        if "built without CUDA" not in str(e):
            raise
        pytest.skip(f"this qload cannot load into {device}: {e}")
    if device != "cpu":
        torch.cuda.synchronize()
    assert torch.equal(qkv.cpu(), torch.cat([q, k, v]))
    want = torch.full(wide.shape, MARK, dtype=torch.bfloat16)
    want[:, 4:4 + half] = o[:, half:]
    assert torch.equal(wide.cpu(), want)
    assert torch.equal(embed_to.cpu(), embed)
    assert torch.equal(norm_f32.cpu(), norm.float())
    assert report["tensors"] == 6 and report["converted_tensors"] == 1
