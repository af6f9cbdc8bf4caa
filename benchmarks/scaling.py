#!/usr/bin/python3
"""Data-parallel scaling: 1 rank vs 2 ranks, on one machine and across two
"nodes" joined by a shaped link, the way the distributed ResNet-50 reference
tables report it (total images/sec, speedup, scaling efficiency).

  sudo benchmarks/scaling.py [--model resnet50] [--batch 8] [--repeats 3]
                             [--out benchmarks/results] [--no-netns]
                             [--compression [--powersgd-rank 4] [--topk 0.001]]
                             [--links 10gbit,1gbit,100mbit]
  benchmarks/scaling.py --replot benchmarks/results/scaling.json   (redraw only)

Every rank gets the same cores (--threads: the machine's cores / 2), so the
one-rank baseline and each of the two ranks compute alike, and what the
efficiency loses is communication that compute did not hide. Configurations:

  - 1 rank;
  - 2 independent 1-rank runs at once (no communication at all): what sharing
    the machine costs two ranks by itself, the ceiling for the rows below;
  - 2 ranks on this machine (`graphrun --nodes 2`: Open MPI over shared
    memory), overlap on and off;
  - 2 "nodes": two network namespaces joined by a veth pair, one rank in each,
    Open MPI over TCP (mpirun's remote shell is `ip netns exec`), the link
    shaped with `tc ... tbf` to 10 Gbit/s and 1 Gbit/s; at each speed FP32 vs
    FP16 gradients on the wire (graphc --allreduce-dtype) and overlap on vs
    off (graphc --no-allreduce-overlap); at 1 Gbit/s also bucket sizes
    (--bucket-mb 5 and 100 next to the default 25).

With --compression the rows are instead gradient compression's (written as
scaling-compression.json and .png): 1 rank uncompressed (the baseline) and
with PowerSGD and with top-k (what their compute costs), 2 separate runs, and
2 "nodes" at 10 Gbit/s, 1 Gbit/s and 100 Mbit/s with fp32 gradients, the fp16
wire, PowerSGD and top-k (deep gradient compression; graphc
--grad-compression), each with the bytes a rank sends per step (from graphc's
summary) and the loss after the run's steps.

The configurations run in rounds (each once per round) so that drifts in
machine speed hit all alike; each run reports the median images/sec of its
timed steps (warmup excluded), and the table gives the median over the rounds.

Beside every measured row with communication, two predictions of
`graphrun PLAN --predict 2` (the error of each is (predicted - measured) /
measured efficiency):

  - "nominal": from the same round's one-rank run (profiled: `--profile
    --report`) and the link as it is named: shared memory as the default
    --intra-link, a shaped link at its tc rate, with half the namespaces'
    ping round trip as latency;
  - "measured inputs": from the same profile and what a user can measure
    before a job as well: each link's bandwidth as a 2-rank 25 MiB allreduce
    through graphrun's communicator achieves it (`graphc-comm-probe bench`,
    the way nccl-tests measures NCCL's bus bandwidth), alone and beside the
    ranks' compute (two one-rank trainings running meanwhile; the ratio is
    --busy-share), and the ranks' compute beside such allreduces (two
    one-rank trainings with and without allreduces looping between the
    ranks' places; the ratio of their speeds is --compute-share).

Both take stragglers from the one-rank run's spread of step times.
Writes scaling.json and scaling.png into --out. The namespaces need root and
iproute2 (`ip`, `tc`); without them (or with --no-netns) only the one-machine
rows are measured, and the JSON says why.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fusion import ROOT, machine, save_summary, tool  # noqa: E402

NAMESPACES = ("graphc-scale0", "graphc-scale1")
DEVICES = ("gcs-veth0", "gcs-veth1")
ADDRESSES = ("10.77.91.1", "10.77.91.2")
SUBNET = "10.77.91.0/24"
# tbf needs a bucket of at least rate / HZ; these leave room at both speeds.
LINKS = {"10gbit": ("10 Gbit/s", "4mb"), "1gbit": ("1 Gbit/s", "512kb"),
         "100mbit": ("100 Mbit/s", "256kb")}
# The default rows' links; --compression adds 100 Mbit/s.
DEFAULT_LINKS = ("10gbit", "1gbit")


def sh(*cmd, check=True):
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


def write_rsh_agent(workdir, addresses, namespaces):
    """mpirun's remote shell (plm_rsh_agent) for "nodes" that are network
    namespaces: HOST COMMAND... runs COMMAND in the namespace of HOST's
    address. Returns its path."""
    agent = os.path.join(workdir, "netns-rsh")
    cases = "".join(f"  {a}) ns={n} ;;\n" for a, n in zip(addresses, namespaces))
    with open(agent, "w") as f:
        f.write("#!/bin/sh\n# mpirun's remote shell: HOST COMMAND... run in HOST's namespace\n"
                f"host=$1; shift\ncase $host in\n{cases}"
                "  *) echo \"netns-rsh: unknown host $host\" >&2; exit 1 ;;\nesac\n"
                # A session directory per node: daemons of one hostname would
                # share /tmp/ompi.HOST.UID and collide in it (a job directory
                # that exists; hwloc's shared topology written at once).
                f"mkdir -p \"{workdir}/tmp-$ns\"\n"
                f"exec ip netns exec \"$ns\" env TMPDIR=\"{workdir}/tmp-$ns\" sh -c \"$*\"\n")
    os.chmod(agent, 0o755)
    return agent


class TwoNodes:
    """Two network namespaces joined by a veth pair, and what mpirun needs to
    start one rank in each: a hostfile and a remote shell that enters the
    namespace of the host it is given."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.teardown()
        sh("ip", "netns", "add", NAMESPACES[0])
        sh("ip", "netns", "add", NAMESPACES[1])
        sh("ip", "link", "add", DEVICES[0], "type", "veth", "peer", "name", DEVICES[1])
        for ns, dev, addr in zip(NAMESPACES, DEVICES, ADDRESSES):
            sh("ip", "link", "set", dev, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        self.hostfile = os.path.join(workdir, "hosts")
        with open(self.hostfile, "w") as f:
            f.write("".join(f"{a} slots=1\n" for a in ADDRESSES))
        self.agent = write_rsh_agent(workdir, ADDRESSES, NAMESPACES)

    def latency(self):
        """Half the mean ping round trip between the namespaces in microseconds,
        and how it was found (50 us assumed without ping: Debian iputils-ping)."""
        if not shutil.which("ping"):
            return 50.0, "assumed (no ping)"
        out = sh("ip", "netns", "exec", NAMESPACES[0], "ping", "-c", "5", "-i", "0.2", "-q",
                 ADDRESSES[1], check=False).stdout
        for line in out.splitlines():
            if "min/avg/max" in line:
                return float(line.split("=")[1].split("/")[1]) * 1000 / 2, "half the ping round trip"
        return 50.0, "assumed (ping failed)"

    def shape(self, link):
        for ns, dev in zip(NAMESPACES, DEVICES):
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
            if link:
                rate, burst = link, LINKS[link][1]
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                   "rate", rate, "burst", burst, "latency", "50ms")

    def launch(self):
        return ["ip", "netns", "exec", NAMESPACES[0], "mpirun", "--hostfile", self.hostfile,
                "-np", "2", "--map-by", "ppr:1:node", "--bind-to", "none",
                "--mca", "plm_rsh_agent", self.agent, "--mca", "btl", "self,tcp",
                "--mca", "btl_tcp_if_include", SUBNET, "--mca", "oob_tcp_if_include", SUBNET]

    @staticmethod
    def teardown():
        for ns in NAMESPACES:
            sh("ip", "netns", "del", ns, check=False)


def netns_unavailable(binaries=("ip", "tc", "mpirun")):
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_NET_ADMIN)"
    for binary in binaries:
        if not shutil.which(binary):
            return f"no {binary} on this machine"
    probe = sh("ip", "netns", "add", "graphc-scale-probe", check=False)
    if probe.returncode != 0:
        return "cannot create a network namespace: " + probe.stderr.strip()
    sh("ip", "netns", "del", "graphc-scale-probe", check=False)
    return None


def predict(graphrun, plan, profile, link_flag, link, work, extra=()):
    """graphrun --predict 2's prediction row for `plan` from a one-rank
    profile, with `link` as --link or --intra-link (`link_flag`)."""
    out = os.path.join(work, "predicted.json")
    cmd = [graphrun, plan, "--predict", "2", "--step-profile", profile, "--report", out,
           link_flag, link, *extra]
    if link_flag == "--intra-link":
        cmd += ["--ranks-per-node", "2"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)["prediction"]["rows"][0]


def allreduce_seconds(launch, probe, load=None, n=0):
    """The median time of the communicator's 25 MiB allreduce on `launch`'s
    ranks, beside n one-rank trainings (`load`) if given."""
    loads = [subprocess.Popen(load, stdout=subprocess.DEVNULL) for _ in range(n)]
    try:
        if loads:
            time.sleep(8)  # past loading and the first steps
        out = subprocess.run(launch + [probe, "bench"], check=True, capture_output=True,
                             text=True).stdout
    finally:
        for p in loads:
            p.kill()
            p.wait()
    for line in out.splitlines():
        if line.startswith("communicator, f32 mean, 1 tensor"):
            return float(line.split("median")[1].split("ms")[0]) / 1000
    sys.exit(f"scaling.py: no times in graphc-comm-probe's output:\n{out}")


def allreduce_bandwidth(launch, probe, latency_us, load=None):
    """The bytes per second a 2-rank 25 MiB fp32 allreduce through the
    communicator achieves (Rabenseifner on 2 ranks: two messages, each taking
    Open MPI's rendezvous of 3 latencies: T = 6 latencies + S / B),
    beside two of the processes `load` starts if given."""
    seconds = allreduce_seconds(launch, probe, load, 2 if load else 0)
    return 25 * 2**20 / max(1e-6, seconds - 6 * latency_us * 1e-6)


def total_rate(reports):
    """The images/sec of several runs' --report files, added up."""
    total = 0.0
    for path in reports:
        with open(path) as f:
            total += json.load(f)["total_images_per_sec"]
    return total


def compute_share(train, probe, work, n=2):
    """The speed n one-rank trainings (`train`) keep while `probe`'s
    allreduces loop between the ranks' places, against their speed alone."""
    def rate(beside):
        reports = [os.path.join(work, f"share-{i}.json") for i in range(n)]
        loads = [subprocess.Popen(train + ["--report", r], stdout=subprocess.DEVNULL)
                 for r in reports]
        while beside and any(p.poll() is None for p in loads):
            subprocess.run(probe, check=True, capture_output=True)
        if any(p.wait() != 0 for p in loads):
            sys.exit("scaling.py: a training beside the probe failed")
        return total_rate(reports)
    return rate(True) / rate(False)


def wire_mebibytes(summary, wire):
    """The MiB a rank sends into the allreduces per step, from graphc's
    summary: PowerSGD's factors or top-k's sets where it says so, else the
    buckets (halved on the fp16 wire: ResNet-50's gradients are all fp32)."""
    for line in summary.splitlines():
        if line.startswith("grad-compression:") and " -> " in line:
            amount, unit = line.split(" -> ")[1].split()[:2]
            return float(amount) * {"MiB": 1.0, "KiB": 1 / 1024, "B": 1 / 2**20}[unit]
    for line in summary.splitlines():
        if line.startswith("data-parallel:") and " in all " in line:
            amount, unit = line.split(" of ")[1].split()[:2]
            mib = float(amount) * {"MiB": 1.0, "KiB": 1 / 1024, "B": 1 / 2**20}[unit]
            return mib / 2 if wire == "fp16" else mib
    return None


def plot(summary, out, name="scaling"):
    """Writes OUT/NAME.json and OUT/NAME.png (efficiency per configuration)."""
    plt = save_summary(summary, out, name)
    table = summary["results"]
    labels, values, colors = [], [], []
    for row in table[1:]:
        label = row["configuration"].replace("2 nodes, ", "").replace(", one machine", "\nshared memory")
        if row["link"] != "none":
            label += f"\n{row['allreduce_dtype']}, {'overlap' if row['overlap'] else 'after bwd'}"
            if row["bucket_mb"] != 25:
                label += f"\n{row['bucket_mb']} MiB buckets"
            if row.get("grad_compression", "none") != "none":
                label = label.replace("fp32, ", "") + f"\n{row['grad_compression']}"
        elif row.get("grad_compression", "none") != "none":
            label += f"\n{row['grad_compression']}"
        labels.append(label)
        values.append(row["scaling_efficiency"])
        colors.append("#2ca02c" if row["link"] == "none" else
                      "#1f77b4" if row["overlap"] else "#9e9e9e")
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(labels)), 4))
    bars = ax.bar(range(len(labels)), values, color=colors)
    for key, color, label in (
            ("predicted_efficiency", "#ff9896", "predicted, nominal links"),
            ("predicted_efficiency_measured_inputs", "#d62728",
             "predicted, measured links and compute")):
        predicted = [row.get(key) for row in table[1:]]
        xs = [i for i, v in enumerate(predicted) if v is not None]
        if xs:
            ax.scatter(xs, [predicted[i] for i in xs], marker="_", s=400, color=color,
                       linewidths=2, zorder=3, label=label)
    if any(row.get("predicted_efficiency") is not None for row in table[1:]):
        ax.legend(fontsize=7, loc="lower left")
    for bar, v in zip(bars, values):
        ax.text(bar.get_x() + bar.get_width() / 2, v, f"{v:.2f}", ha="center", va="bottom",
                fontsize=8)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_ylabel("scaling efficiency (2 ranks vs 1)")
    ax.set_ylim(0, 1.15)
    ax.set_title(f"{summary['model']}, batch {summary['batch_per_rank']}/rank, "
                 f"{summary['threads_per_rank']} thread(s)/rank: {summary['machine']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"{name}.png"), dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8, help="batch per rank")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="rounds (median)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--build", default=os.environ.get("GRAPHC_BUILD_DIR",
                                                          os.path.join(ROOT, "build")))
    parser.add_argument("--no-netns", action="store_true", help="one machine only")
    parser.add_argument("--compression", action="store_true",
                        help="gradient compression's rows (none, fp16, PowerSGD, top-k) instead")
    parser.add_argument("--powersgd-rank", type=int, default=4)
    parser.add_argument("--links", default=None,
                        help="comma-separated shaped links for the 2-node rows (of "
                             f"{', '.join(LINKS)}; default: {', '.join(DEFAULT_LINKS)}, "
                             "and all three with --compression)")
    parser.add_argument("--topk", default="0.001",
                        help="top-k's RATIO[:WARMUP_STEPS] (graphc --grad-compression=topk:...)")
    parser.add_argument("--replot", metavar="JSON",
                        help="redraw the chart of an earlier run's scaling.json, measuring nothing")
    args = parser.parse_args()
    if args.replot:
        with open(args.replot) as f:
            summary = json.load(f)
        name = "scaling-compression" if summary.get("compression_rows") else "scaling"
        plot(summary, args.out, name)
        print(f"wrote {os.path.join(args.out, name + '.png')}")
        return
    if args.repeats < 1 or args.steps < 1:
        sys.exit("scaling.py: --repeats and --steps must be at least 1")
    graphc, graphrun = tool("graphc", args.build), tool("graphrun", args.build)
    model = os.path.join(ROOT, "models", f"{args.model}.mlir")
    if not os.path.exists(model):
        sys.exit(f"scaling.py: no model {model}")
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="graphc-scaling-")
    threads = max(1, (os.cpu_count() or 2) // 2)
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

    # One plan per compile-time variant: (wire, overlap, bucket MiB,
    # compression).
    powersgd = f"powersgd:{args.powersgd_rank}"
    topk = f"topk:{args.topk}"
    if args.compression:
        variants = [("fp32", True, 25, "none"), ("fp16", True, 25, "none"),
                    ("fp32", True, 25, powersgd), ("fp32", True, 25, topk)]
    else:
        variants = [("fp32", True, 25, "none"), ("fp32", False, 25, "none"),
                    ("fp16", True, 25, "none"), ("fp16", False, 25, "none"),
                    ("fp32", True, 5, "none"), ("fp32", True, 100, "none")]
    plans, wire_mib = {}, {}
    for wire, overlap, bucket, compression in variants:
        plan = os.path.join(work, f"{wire}-{'overlap' if overlap else 'after'}-{bucket}-"
                                  f"{compression.replace(':', '')}.plan")
        cmd = [graphc, "compile", model, "--batch-size", str(args.batch), "--lr", "0.01",
               "--bucket-mb", str(bucket), "-o", plan]
        cmd += (["--grad-compression", compression] if compression != "none"
                else ["--allreduce-dtype", wire])
        if not overlap:
            cmd.append("--no-allreduce-overlap")
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        variant = (wire, overlap, bucket, compression)
        plans[variant] = plan
        wire_mib[variant] = wire_mebibytes(out, wire)
        summary_line = [l for l in out.splitlines()
                        if l.startswith("data-parallel:") or l.startswith("grad-compression:")]
        print(f"compiled {args.model} batch {args.batch}: {'; '.join(summary_line)}", flush=True)

    why_not = "--no-netns" if args.no_netns else netns_unavailable()
    base_variant = ("fp32", True, 25, "none")
    configs = [
        {"name": "1 rank", "link": None, "ranks": 1, "variant": base_variant},
        {"name": "2 separate runs", "link": "none", "ranks": 2, "variant": base_variant},
    ]
    if args.compression:
        configs.insert(1, {"name": "1 rank", "link": None, "ranks": 1,
                           "variant": ("fp32", True, 25, powersgd)})
        configs.insert(2, {"name": "1 rank", "link": None, "ranks": 1,
                           "variant": ("fp32", True, 25, topk)})
    else:
        configs += [
            {"name": "2 ranks, one machine", "link": "shm", "ranks": 2, "variant": base_variant},
            {"name": "2 ranks, one machine", "link": "shm", "ranks": 2,
             "variant": ("fp32", False, 25, "none")},
        ]
    links_used = list(LINKS) if args.compression else list(DEFAULT_LINKS)
    if args.links is not None:
        links_used = [l for l in args.links.split(",") if l]
        unknown = [l for l in links_used if l not in LINKS]
        if unknown or not links_used:
            sys.exit(f"scaling.py: --links takes some of {', '.join(LINKS)}, got {args.links!r}")
    if why_not is None and args.compression:
        for link in links_used:
            for variant in variants:
                configs.append({"name": f"2 nodes, {LINKS[link][0]}", "link": link,
                                "ranks": 2, "variant": variant})
    elif why_not is None:
        for link in links_used:
            for wire in ("fp32", "fp16"):
                for overlap in (True, False):
                    configs.append({"name": f"2 nodes, {LINKS[link][0]}", "link": link,
                                    "ranks": 2, "variant": (wire, overlap, 25, "none")})
        for bucket in (5, 100) if "1gbit" in links_used else ():
            configs.append({"name": "2 nodes, 1 Gbit/s", "link": "1gbit", "ranks": 2,
                            "variant": ("fp32", True, bucket, "none")})
    else:
        print(f"two-node rows skipped: {why_not}", flush=True)

    nodes = TwoNodes(work) if why_not is None else None
    latency_us, latency_how = nodes.latency() if nodes else (None, None)
    if nodes:
        print(f"namespaces' link latency: {latency_us:.0f} us ({latency_how})", flush=True)
    # Each link as the communicator achieves it, measured once before the runs.
    probe = tool("graphc-comm-probe", args.build)
    # The load: each rank's compute, a one-rank training of the plan.
    load = [graphrun, plans[base_variant], "--steps", "100000", "--warmup", "0",
            "--threads", str(threads)]
    local = ["mpirun", "-np", "2", "--bind-to", "none", "--oversubscribe"]
    achieved, busy, computing = {}, {}, {}
    timed = [graphrun, plans[base_variant], "--steps", "5", "--warmup", "1",
             "--threads", str(threads)]
    for link in ["shm"] + (links_used if nodes else []):
        launch, latency = (local, 1.0) if link == "shm" else (nodes.launch(), latency_us)
        if link != "shm":
            nodes.shape(link)
        achieved[link] = allreduce_bandwidth(launch, probe, latency)
        busy[link] = allreduce_bandwidth(launch, probe, latency, load) / achieved[link]
        computing[link] = compute_share(timed, launch + [probe, "bench"], work)
        print(f"allreduce bandwidth achieved on {link}: {achieved[link] / 1e6:.1f} MB/s, "
              f"beside compute {busy[link]:.2f} of it; compute beside allreduces "
              f"{computing[link]:.2f} of its speed", flush=True)

    def links(link):
        """(flag, nominal, measured, shares) link arguments of graphrun --predict."""
        shares = ["--busy-share", f"{min(1.0, busy[link]):.3f}",
                  "--compute-share", f"{min(1.0, computing[link]):.3f}"]
        if link == "shm":
            return "--intra-link", "10GB/s,1us", f"{achieved['shm'] / 1e6:.1f}MB/s,1us", shares
        return ("--link", f"{link},{latency_us:.0f}us",
                f"{achieved[link] / 1e6:.1f}MB/s,{latency_us:.0f}us", shares)

    try:
        for r in range(args.repeats):
            for i, c in enumerate(configs):
                plan = plans[c["variant"]]
                report = os.path.join(work, f"run-{i}.json")
                run = [graphrun, plan, "--steps", str(args.steps + args.warmup), "--warmup",
                       str(args.warmup), "--threads", str(threads), "--report", report]
                if c["link"] == "none":
                    # Two plain one-rank runs side by side: their rates add up.
                    second = os.path.join(work, f"run-{i}-b.json")
                    procs = [subprocess.Popen(run[:-1] + [path], stdout=subprocess.DEVNULL)
                             for path in (report, second)]
                    if any(p.wait() != 0 for p in procs):
                        sys.exit("scaling.py: a separate run failed")
                    with open(report) as f, open(second) as g:
                        a, b = json.load(f), json.load(g)
                    c.setdefault("runs", []).append(a["total_images_per_sec"] +
                                                    b["total_images_per_sec"])
                    c.setdefault("loss", []).append(a["final_loss"])
                    c.setdefault("wait_s", []).append(0.0)
                    print(f"round {r + 1}/{args.repeats} {c['name']}: "
                          f"{c['runs'][-1]:.2f} images/sec", flush=True)
                    continue
                # A profile per compression: the predictions match its commands.
                profile = os.path.join(work, f"profile-{r}-{c['variant'][3]}.json")
                if c["ranks"] == 1:
                    cmd = run + ["--profile"]
                elif c["link"] == "shm":
                    cmd = run + ["--nodes", "2"]
                else:
                    nodes.shape(c["link"])
                    cmd = nodes.launch() + run
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                with open(report) as f:
                    j = json.load(f)
                if c["ranks"] == 1:
                    shutil.copyfile(report, profile)
                else:
                    flag, nominal, measured, shares = links(c["link"])
                    row = predict(graphrun, plan, profile, flag, nominal, work)
                    c.setdefault("predicted", []).append(row["scaling_efficiency"])
                    row = predict(graphrun, plan, profile, flag, measured, work, shares)
                    c.setdefault("predicted_measured", []).append(row["scaling_efficiency"])
                    c.setdefault("predicted_exposed_s", []).append(
                        row["exposed_comm_ms"] / 1000 * (args.steps))
                c.setdefault("runs", []).append(j["total_images_per_sec"])
                c.setdefault("loss", []).append(j["final_loss"])
                c.setdefault("wait_s", []).append(max(j.get("per_rank_collective_wait_seconds",
                                                            [0])))
                wire, overlap, bucket, compression = c["variant"]
                print(f"round {r + 1}/{args.repeats} {c['name']} ({wire}, "
                      f"{'overlap' if overlap else 'no overlap'}, {bucket} MiB buckets, "
                      f"compression {compression}): "
                      f"{j['total_images_per_sec']:.2f} images/sec" +
                      (f", predicted efficiency {c['predicted'][-1]:.3f} (nominal), "
                       f"{c['predicted_measured'][-1]:.3f} (measured inputs)" if "predicted" in c
                       else ""), flush=True)
    finally:
        if nodes:
            nodes.teardown()
        shutil.rmtree(work, ignore_errors=True)

    base = statistics.median(configs[0]["runs"])
    table = []
    for c in configs:
        wire, overlap, bucket, compression = c["variant"]
        total = statistics.median(c["runs"])
        speedup = total / base
        predicted = statistics.median(c["predicted"]) if "predicted" in c else None
        measured_in = (statistics.median(c["predicted_measured"]) if "predicted" in c
                       else None)
        table.append({
            "configuration": c["name"], "link": c["link"] or "-", "ranks": c["ranks"],
            "allreduce_dtype": wire, "overlap": overlap, "bucket_mb": bucket,
            "grad_compression": compression, "wire_mib_per_step": wire_mib[c["variant"]],
            "final_loss": statistics.median(c["loss"]), "final_losses": c["loss"],
            "total_images_per_sec": total, "speedup": speedup,
            "scaling_efficiency": speedup / c["ranks"], "runs": c["runs"],
            "collective_wait_seconds_max_rank": c["wait_s"],
            "predicted_efficiency": predicted,
            "prediction_error": (predicted - speedup / c["ranks"]) / (speedup / c["ranks"])
                                if predicted is not None else None,
            "predicted_runs": c.get("predicted", []),
            "predicted_efficiency_measured_inputs": measured_in,
            "prediction_error_measured_inputs":
                (measured_in - speedup / c["ranks"]) / (speedup / c["ranks"])
                if measured_in is not None else None,
            "predicted_measured_inputs_runs": c.get("predicted_measured", []),
            "predicted_collective_wait_seconds": c.get("predicted_exposed_s", []),
        })
    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "model": args.model,
               "batch_per_rank": args.batch, "threads_per_rank": threads,
               "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats,
               "two_nodes": "measured" if why_not is None else f"skipped: {why_not}",
               "link_latency_us": latency_us, "link_latency": latency_how,
               "allreduce_bytes_per_second": achieved, "busy_share": busy,
               "compute_share": computing, "compression_rows": args.compression,
               "results": table}

    print()
    print(f"machine: {summary['machine']}; {args.model}, batch {args.batch} per rank, "
          f"{threads} thread(s) per rank, FP32 compute; median of {args.repeats} rounds")
    print(f"{'configuration':<22} {'wire':>5} {'overlap':>8} {'bucket':>7} {'compression':>11} "
          f"{'MiB/step':>8} {'loss':>7} "
          f"{'total img/s':>12} {'speedup':>8} {'efficiency':>11} {'nominal':>8} {'error':>7} "
          f"{'measured inputs':>16} {'error':>7}")
    for row in table:
        collective = row["ranks"] > 1 and row["link"] != "none"
        wire = row["allreduce_dtype"] if collective else "-"
        overlap = ("yes" if row["overlap"] else "no") if collective else "-"
        bucket = f"{row['bucket_mb']} MiB" if collective else "-"
        mib = f"{row['wire_mib_per_step']:.1f}" if collective else "-"
        print(f"{row['configuration']:<22} {wire:>5} {overlap:>8} {bucket:>7} "
              f"{row['grad_compression']:>11} {mib:>8} {row['final_loss']:>7.4f} "
              f"{row['total_images_per_sec']:>12.2f} {row['speedup']:>7.2f}x "
              f"{row['scaling_efficiency']:>11.3f}" +
              (f" {row['predicted_efficiency']:>8.3f} {100 * row['prediction_error']:>6.1f}%"
               f" {row['predicted_efficiency_measured_inputs']:>16.3f}"
               f" {100 * row['prediction_error_measured_inputs']:>6.1f}%"
               if row["predicted_efficiency"] is not None else f" {'-':>8} {'-':>7} {'-':>16} {'-':>7}"))

    name = "scaling-compression" if args.compression else "scaling"
    plot(summary, args.out, name)
    print(f"\nwrote {os.path.join(args.out, name + '.json')} and {name}.png")


if __name__ == "__main__":
    main()
