#!/usr/bin/env python3
"""What a command's reads look like at the block device: requests, their mean size, how many
were in flight, bytes read, and the command's wall time.

    bench/disk_requests.py [--device vda] [--rounds N] [--cold] -- COMMAND [ARGS...]

--cold drops the page cache before each round (root). The device's counters come from
/sys/block/<device>/stat (Documentation/block/stat.rst): reads completed and sectors read are
taken before and after the command, the in-flight count is sampled every 10 ms while it runs
and averaged over the samples where it was above zero. Other processes reading the same device
meanwhile are counted too, so run it on a quiet machine.

How docs/benchmarks.md found that request size decides cold loads on the project's VM (qload
against fastsafetensors, with /sys/block/<device>/queue/max_sectors_kb changed between runs).
"""
import argparse
import statistics
import subprocess
import sys
import threading
import time


def read_stat(device):
    fields = [int(x) for x in open(f"/sys/block/{device}/stat").read().split()]
    return {"reads": fields[0], "sectors": fields[2], "in_flight": fields[8]}


def one_round(device, command, cold):
    if cold:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    samples, done = [], threading.Event()

    def sample():
        while not done.is_set():
            samples.append(read_stat(device)["in_flight"])
            time.sleep(0.01)

    before = read_stat(device)
    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.monotonic()
    proc = subprocess.run(command, stdout=subprocess.DEVNULL)
    seconds = time.monotonic() - start
    done.set()
    sampler.join()
    after = read_stat(device)
    if proc.returncode != 0:
        sys.exit(f"disk_requests: {' '.join(command)} exited {proc.returncode}")
    reads = after["reads"] - before["reads"]
    read_bytes = (after["sectors"] - before["sectors"]) * 512
    busy = [s for s in samples if s > 0]
    return {"seconds": seconds, "requests": reads, "mean_kib": read_bytes / max(reads, 1) / 1024,
            "in_flight": statistics.mean(busy) if busy else 0.0, "gb": read_bytes / 1e9}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="vda", help="a name under /sys/block (default vda)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="drop the page cache before each round (root)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given")
    print(f"{'round':>5} {'seconds':>8} {'requests':>9} {'mean KiB':>9} {'in flight':>10} {'GB read':>8}")
    for r in range(args.rounds):
        x = one_round(args.device, command, args.cold)
        print(f"{r + 1:>5} {x['seconds']:>8.2f} {x['requests']:>9} {x['mean_kib']:>9.0f} {x['in_flight']:>10.1f} "
              f"{x['gb']:>8.2f}")


if __name__ == "__main__":
    main()
