"""Plots of a kopf-bench report: python bench/plot.py DIR (reads DIR/results.json).

- lateness.png: timer lateness by percentile, per arm and N (scenarios 1 and 6),
  the median over pairs at each percentile;
- cpu_rss.png: CPU cores and steady RSS against N, per arm (scenarios 1 and 2, and 7);
Both use log scales. Runs in bench/.venv (matplotlib is pinned in python/requirements-plot.txt).
"""
import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GRID = [1, 5, 10, 25, 50, 75, 90, 95, 98, 99, 99.5, 99.8, 99.9, 99.95, 100]
COLORS = {"kopf-rs": "tab:orange", "kopf-py": "tab:blue", "tokio": "tab:green", "kube-loop": "tab:gray",
          "kube-store": "tab:purple"}


def median_by(trials, key):
    groups = {}
    for t in trials:
        if key in t["metrics"]:
            groups.setdefault((t["scenario"], t["arm"], t["n"]), []).append(t["metrics"][key])
    return {k: statistics.median(v) for k, v in groups.items()}


def lateness_plot(trials, out):
    curves = {}
    for t in trials:
        if t["scenario"] in ("timers", "timers-write") and t.get("lateness_ms"):
            curves.setdefault((t["scenario"], t["arm"], t["n"]), []).append(t["lateness_ms"])
    if not curves:
        return False
    scenarios = sorted({k[0] for k in curves})
    fig, axes = plt.subplots(1, len(scenarios), figsize=(7 * len(scenarios), 5), squeeze=False)
    for ax, scenario in zip(axes[0], scenarios):
        ns = sorted({k[2] for k in curves if k[0] == scenario})
        styles = ["-", "--", ":", "-."]
        for (sc, arm, n), runs in sorted(curves.items()):
            if sc != scenario:
                continue
            width = min(len(r) for r in runs)
            med = [max(statistics.median(r[i] for r in runs), 1e-3) for i in range(width)]
            xs = [100 - g for g in GRID[:width]]
            ax.plot(xs, med, styles[ns.index(n) % 4], color=COLORS.get(arm), marker=".",
                    label=f"{arm} N={n}")
        ax.set_xscale("log")
        ax.invert_xaxis()
        ax.set_yscale("log")
        ax.set_xlabel("100 − percentile (p50 at 50, p99 at 1, p99.9 at 0.1)")
        ax.set_ylabel("lateness (ms, vs. the 1 s interval)")
        ax.set_title(f"timer lateness ({scenario})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return True


def cpu_rss_plot(trials, out):
    cores = median_by(trials, "cores")
    rss = median_by(trials, "rss_mb")
    series = sorted({(sc, arm) for (sc, arm, _) in cores
                     if sc in ("timers", "daemons", "inproc-timers", "inproc-daemons")})
    if not series:
        return False
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5))
    for sc, arm in series:
        style = {"timers": "-", "daemons": "--", "inproc-timers": ":", "inproc-daemons": "-."}[sc]
        ns = sorted(n for (s, a, n) in cores if (s, a) == (sc, arm))
        a1.plot(ns, [max(cores[(sc, arm, n)], 1e-4) for n in ns], style, marker="o",
                color=COLORS.get(arm), label=f"{arm} {sc}")
        ns = sorted(n for (s, a, n) in rss if (s, a) == (sc, arm))
        a2.plot(ns, [rss[(sc, arm, n)] for n in ns], style, marker="o", color=COLORS.get(arm),
                label=f"{arm} {sc}")
    for ax, label in ((a1, "CPU (cores, user+sys)"), (a2, "steady RSS (MB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N (objects)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("CPU and RSS against N (medians over pairs)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return True


def main():
    out = Path(sys.argv[1])
    trials = json.loads((out / "results.json").read_text())["trials"]
    made = []
    if lateness_plot(trials, out / "lateness.png"):
        made.append("lateness.png")
    if cpu_rss_plot(trials, out / "cpu_rss.png"):
        made.append("cpu_rss.png")
    print(f"bench/plot.py: wrote {', '.join(made) or 'nothing (no data to plot)'} in {out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
