"""The peer suite's chart: GB/s at the median, one bar per loader and mode, as SVG."""


def draw(results, modes, path, subtitle):
    import matplotlib

    matplotlib.use("Agg")  # no display; SVG only
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "qload-peers"  # stable ids: the SVG diffs cleanly
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable
    keys = list(results)
    height = 0.8 / len(modes)
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(keys) + 1.4))
    for i, mode in enumerate(modes):
        values = [results[k]["modes"][mode]["gbps"] for k in keys]
        positions = [j + (i - (len(modes) - 1) / 2) * height for j in range(len(keys))]
        bars = ax.barh(positions, values, height=height, label=mode)
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], padding=2, fontsize=7)
    ax.set_yticks(range(len(keys)), labels=[results[k]["label"] + (" [mapped]" if results[k]["memory"] == "mapped" else "") for k in keys], fontsize=8)
    ax.invert_yaxis()
    # Log scale: mapped loaders warm only map the page cache and reach tens of GB/s, which on a
    # linear axis would flatten every loader that copies the bytes into memory of its own.
    ax.set_xscale("log")
    ax.set_xlabel("GB/s of tensor bytes (median, log scale); longer is faster")
    ax.set_title(f"Loading into CPU memory, each loader in its own process\n{subtitle}; "
                 "[mapped]: hands back page-cache mappings, not memory of its own", fontsize=9)
    ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
