#!/usr/bin/env python3
"""The report of run_training_bench.sh: a table, training_bench.json and
training_bench.png in OUT.

usage: training_report.py OUT EVERY CKPT_BYTES RATE_MBPS RESULT...
RESULT: NAME|TRAIN_LOG|RESUME_LOG|T_LOSS|METRICS (the last three empty for
the run with no checkpoints).
"""
import json
import math
import os
import statistics
import sys

MTBFS = (1, 6, 24)  # hours between failures of the job, for the model


def events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def metric(path, name):
    with open(path) as f:
        for line in f:
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def run(spec):
    name, log, rlog, t_loss, mpath = (spec.split("|") + [""] * 5)[:5]
    ev = events(log)
    steps = [e["secs"] for e in ev if e["event"] == "step" and e["step"] > 1]
    r = {"name": name, "step_s": statistics.mean(steps)}
    saves = {}
    for e in ev:
        if e["event"] == "save":
            s = e["secs"] + e["barrier"]
            saves[e["step"]] = max(saves.get(e["step"], 0), s)
    if saves:
        r["save_s"] = statistics.mean(saves.values())
    # Of each rank's save: its tracker (write, fsync, rename), and its two
    # renames (the checkpoint's and the tracker's).
    tracker = [e["tracker"] for e in ev if e["event"] == "save" and "tracker" in e]
    rename = [e["rename"] for e in ev if e["event"] == "save" and "rename" in e]
    if tracker:
        r["tracker_s"] = statistics.mean(tracker)
        r["rename_s"] = statistics.mean(rename)
        r["rename_max_s"] = max(rename)
    if rlog:
        rev = events(rlog)
        first = min(e["t"] for e in rev if e["event"] == "step")
        r["recovery_s"] = first - float(t_loss)
        # The job's side alone: its restart (ranks started) to that step.
        r["restart_s"] = first - min(e["t"] for e in rev
                                     if e["event"] == "start")
        loads = {e["rank"]: e["secs"] for e in rev if e["event"] == "load"}
        r["load_s"] = max(loads.values()) if loads else 0.0
        r["lost_rank_load_s"] = loads.get(1, 0.0)
    if mpath:
        peer = metric(mpath, "reftfs_peer_fetched_bytes_total")
        decoded = metric(mpath, "reftfs_parity_rebuilt_bytes_total")
        r["from_copies"] = max(peer - decoded, 0)
        r["from_decode"] = decoded
        r["from_persist"] = metric(mpath, "reftfs_readthrough_bytes_total")
    return r


def lost_per_day(save_s, recovery_s, interval_s, mtbf_h):
    """Hours a day the job does not train: its saves' stalls, and per
    failure the work since the last checkpoint (half an interval on
    average) and the recovery (Gemini's t_ckpt + 1/(2f) + t_rtvl)."""
    day = 86400.0
    failures = 24.0 / mtbf_h
    stalls = day / interval_s * save_s
    per_failure = save_s + interval_s / 2 + recovery_s
    return (stalls + failures * per_failure) / 3600


def main():
    out, every, ckpt, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    runs = [run(s) for s in sys.argv[5:]]
    base = next(r for r in runs if r["name"] == "none")["step_s"]
    mib = 1 << 20
    print()
    print("%-12s %8s %9s %9s %10s %10s %9s %22s %11s" % (
        "", "step s", "overhead", "save s", "recovery s", "restart s",
        "load s", "node 1 brought back", "Young T*"))
    print("%-12s %8s %9s %9s %10s %10s %9s %22s %11s" % (
        "", "", "vs none", "blocking", "loss->step", "job->step",
        "lost rank", "copies/decode/persist", "MTBF 6 h"))
    for r in runs:
        r["overhead"] = r["step_s"] / base - 1
        if "save_s" not in r:
            print("%-12s %8.3f %9s" % (r["name"], r["step_s"], "-"))
            continue
        # Young's interval for a job failing every 6 hours.
        r["young_interval_s"] = math.sqrt(2 * r["save_s"] * 6 * 3600)
        src = ("%d/%d/%d MiB" % (r["from_copies"] / mib, r["from_decode"] / mib,
                                 r["from_persist"] / mib)
               if "from_copies" in r else "shared storage")
        print("%-12s %8.3f %8.1f%% %9.3f %10.1f %10.1f %9.2f %22s %9.0f s" % (
            r["name"], r["step_s"], 100 * r["overhead"], r["save_s"],
            r["recovery_s"], r["restart_s"], r["lost_rank_load_s"], src,
            r["young_interval_s"]))
    print()
    print("of a rank's save, mean: its tracker (write, fsync, rename); its two "
          "renames (the slowest):")
    for r in runs:
        if "tracker_s" in r:
            print("  %-12s tracker %.3f s, renames %.3f s (%.3f s)" % (
                r["name"], r["tracker_s"], r["rename_s"], r["rename_max_s"]))
    print()
    print("time lost per day (h), Gemini's model, at each run's own Young interval:")
    for r in runs:
        if "save_s" not in r:
            continue
        cells = []
        for h in MTBFS:
            t = math.sqrt(2 * r["save_s"] * h * 3600)
            cells.append("MTBF %2d h: %.3f" % (h, lost_per_day(
                r["save_s"], r["recovery_s"], t, h)))
        print("  %-12s %s" % (r["name"], ", ".join(cells)))
    with open(os.path.join(out, "training_bench.json"), "w") as f:
        json.dump({"every": every, "ckpt_bytes": ckpt, "rate_mbps": rate,
                   "runs": runs}, f, indent=1)
    plot(out, runs)


def plot(out, runs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MTBFS), figsize=(12, 4), sharey=False)
    intervals = [10 * 1.15 ** i for i in range(45)]  # 10 s .. 77 min
    for ax, h in zip(axes, MTBFS):
        for r in runs:
            if "save_s" not in r:
                continue
            ys = [lost_per_day(r["save_s"], r["recovery_s"], t, h) * 60
                  for t in intervals]
            ax.plot([t / 60 for t in intervals], ys,
                    label=r["name"] if r["name"] != "shared"
                    else "shared storage alone",
                    linestyle="--" if r["name"] == "shared" else "-")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title("a failure every %d h" % h)
        ax.set_xlabel("checkpoint interval (min)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("training time lost per day (min)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Time lost against checkpoint interval (Gemini's model, "
                 "this run's saves and recoveries)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "training_bench.png"), dpi=90)


if __name__ == "__main__":
    main()
