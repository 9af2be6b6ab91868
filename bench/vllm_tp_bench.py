"""vLLM's `--load-format qload` under tensor parallelism against vLLM's own safetensors loader,
rank by rank, on one checkpoint in one run: seconds per rank's load (warm page cache, best of
--rounds, loaders alternating; each includes building the rank's model, the same for all), and
the bytes qload read for the rank against the checkpoint's.

Each rank is emulated in this process (python/tests/vllm/vllm_llama.py: vLLM's own parallel
layers, loaded through DefaultModelLoader.load_weights), since vLLM's CUDA wheel cannot start a
world without a GPU. Run it with the vLLM suite's environment, which python.vllm makes:

  ~/.cache/qload/vllm-*/bin/python bench/vllm_tp_bench.py --qload build/qload [--tp 2]
      [--checkpoint DIR] [--rounds 3] [--cold]

Without --checkpoint it synthesizes a llama (`qload synth`, 2048 hidden, 8 layers, about 0.8 GB).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qload", required=True, help="the qload CLI of the build (its python/ is beside it)")
    ap.add_argument("--checkpoint")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="drop the page cache before each load (root)")
    args = ap.parse_args()
    build = os.path.dirname(os.path.abspath(args.qload))
    sys.path[:0] = [os.path.join(build, "python"), os.path.join(root, "python", "tests", "vllm")]
    import qload
    import qload.vllm
    import vllm_llama
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    work = tempfile.TemporaryDirectory()
    path = args.checkpoint
    if path is None:
        path = os.path.join(work.name, "llama")
        subprocess.run([args.qload, "synth", path, "--layers", "8", "--hidden", "2048", "--intermediate", "5632",
                        "--vocab", "32000", "--heads", "16", "--kv-heads", "4", "--shards", "2"],
                       check=True, stdout=subprocess.DEVNULL)
    stored = sum(t["nbytes"] for t in qload.inspect(path)["tensors"])
    def drop_caches() -> None:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")

    for name in os.listdir(path):  # warm: every byte in the page cache
        with open(os.path.join(path, name), "rb") as f:
            while f.read(1 << 24):
                pass
    qload.vllm.register()
    loaders = {
        "vllm safetensors": lambda: DefaultModelLoader(LoadConfig(load_format="safetensors")),
        "qload (default: auto)": lambda: get_model_loader(LoadConfig(load_format="qload")),
        "qload read, rank's parts": lambda: get_model_loader(
            LoadConfig(load_format="qload", model_loader_extra_config={"qload": {"load_mode": "read"}})),
        "qload read, whole tensors": lambda: get_model_loader(LoadConfig(
            load_format="qload", model_loader_extra_config={"qload_regions": False, "qload": {"load_mode": "read"}})),
        "qload mmap, rank's parts": lambda: get_model_loader(
            LoadConfig(load_format="qload", model_loader_extra_config={"qload": {"load_mode": "mmap"}})),
    }
    cache = "cold (page cache dropped before each load)" if args.cold else "warm"
    print(f"checkpoint {path}: {stored / 1e9:.3f} GB stored; tp {args.tp}; {cache}; best of {args.rounds}")
    print(f"{'rank':>4}  {'loader':<26} {'seconds':>8} {'vs vllm':>8} {'read GB':>8} {'read / stored':>13}  mode")
    for rank in range(args.tp):
        vllm_llama.set_tp_rank(rank, args.tp)
        best, read, modes = {}, {}, {}
        for _ in range(args.rounds):
            for label, make in loaders.items():
                loader = make()
                if args.cold:
                    drop_caches()
                start = time.perf_counter()
                model = vllm_llama.load(loader, path)
                seconds = time.perf_counter() - start
                best[label] = min(best.get(label, seconds), seconds)
                report = getattr(loader, "qload_report", None)
                if report:
                    modes[label] = "mmap" if report["engine"] == "mmap" else "read"
                if report and report["engine"] != "mmap":  # mapped: the pages touched are not counted
                    read[label] = vllm_llama.read_bytes(loader)  # the stream's and load_into's
                del model
        for label in loaders:
            share = f"{read[label] / 1e9:8.3f} {read[label] / stored:13.3f}" if label in read else f"{'':8} {'':13}"
            print(f"{rank:>4}  {label:<26} {best[label]:8.3f} {best[label] / best['vllm safetensors']:8.2f} {share}  "
                  f"{modes.get(label, '')}")


if __name__ == "__main__":
    main()
