#!/usr/bin/python3
"""Data-parallel scaling where tc cannot shape the link: 2 and 4 "nodes" joined
by links with added latency, each row measured and predicted
(`graphrun --predict`) side by side.

  sudo benchmarks/scaling_links.py [--model resnet50] [--batch 8] [--repeats 3]
                                   [--links 1gbit,1gbit:5ms,1gbit:20ms]
                                   [--buckets 25,2] [--four-nodes 1gbit,1gbit:5ms]
                                   [--out benchmarks/results]

The "nodes" are network namespaces, one rank in each, Open MPI over TCP; they
are joined by graphc-linkem (tools/linkem), which carries each node's packets
through TUN devices over an emulated switch: each node's link has the named
bandwidth each way, every packet a fixed one-way delay (tc's netem does this
where the kernel has it; graphc-linkem does not need it). Jumbo frames (MTU
9000). Rows, run in rounds (each once per round; medians over the rounds):

  - 1 rank; 2 and 4 "separate runs" (no communication: what sharing this
    machine's cores costs, the ceiling for the rows below): one one-rank run
    timed while 1 or 3 others compute beside it all along, its rate times 2
    or 4;
  - 2 nodes on each of --links, at each of --buckets (MiB; small buckets make
    the step latency-bound);
  - 4 nodes on each of --four-nodes, 25 MiB buckets. On a machine with fewer
    than 4 cores per rank's thread the 4 ranks share cores, so their
    predictions start from the 4 separate runs' profile (one rank's step as
    it is while 3 others compute beside it), not from the lone rank's.
    Where a row's ranks outnumber the cores, the cores are shared: compare
    its efficiency with its separate runs' ceiling.

Beside every measured row, two predictions of its total images/sec
(`graphrun PLAN --predict N --step-profile` the same round's profile), with
the error (predicted - measured) / measured:

  - "nominal": the link as it is named, with half the namespaces' ping round
    trip as its latency;
  - "measured inputs": the link as a user measures it before a job (the
    latency-bandwidth fit of 2-rank allreduces of 1 MiB and 25 MiB through
    graphrun's communicator, `graphc-comm-probe bench`: L and B of
    T = 6 L + S / B, Rabenseifner's two messages each taking Open MPI's
    rendezvous of 3 latencies), and the busy and compute shares as scaling.py
    measures them, at the row's number of ranks (a 25 MiB allreduce beside N
    one-rank trainings against alone; N trainings beside looping allreduces
    against alone).

Writes scaling-links.json and scaling-links.png into --out. Needs root,
iproute2, ping and /dev/net/tun.
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
from scaling import (allreduce_seconds, compute_share, netns_unavailable, sh,  # noqa: E402
                     total_rate, wire_mebibytes, write_rsh_agent)

NAMESPACES = tuple(f"graphc-link{i}" for i in range(4))
DEVICES = tuple(f"gcl-tun{i}" for i in range(4))
ADDRESSES = tuple(f"10.77.95.{i + 1}" for i in range(4))
SUBNET = "10.77.95.0/24"
MIB = 2**20


def link_text(link):
    """'1gbit:5ms' (this script's spelling: commas separate links) as
    graphc-linkem and graphrun --link read it: '1gbit,5ms'."""
    return link.replace(":", ",")


def link_name(link):
    rate, _, delay = link.partition(":")
    rate = rate.replace("gbit", " Gbit/s").replace("mbit", " Mbit/s")
    return f"{rate} + {delay}" if delay else rate


class EmulatedNodes:
    """Four network namespaces, each with one of graphc-linkem's TUN devices,
    and what mpirun needs to start one rank in each of the first N."""

    def __init__(self, workdir, linkem):
        self.workdir, self.linkem, self.proc = workdir, linkem, None
        self.teardown()
        for ns in NAMESPACES:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        self.agent = write_rsh_agent(workdir, ADDRESSES, NAMESPACES)
        self.link = None

    def set_link(self, link):
        """Restarts graphc-linkem with `link` (its devices vanish with it) and
        gives each namespace its new device."""
        if link == self.link:
            return
        self.stop_linkem()
        ports = [f"{d}={a}" for d, a in zip(DEVICES, ADDRESSES)]
        self.proc = subprocess.Popen([self.linkem, "--link", link_text(link), *ports],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "ready" not in line:
            sys.exit(f"scaling_links.py: graphc-linkem did not start: {line!r}")
        for ns, dev, addr in zip(NAMESPACES, DEVICES, ADDRESSES):
            sh("ip", "link", "set", dev, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "mtu", "9000", "up")
        self.link = link

    def latency_us(self):
        """Half the mean ping round trip between the first two namespaces."""
        out = sh("ip", "netns", "exec", NAMESPACES[0], "ping", "-c", "5", "-i", "0.2", "-q",
                 ADDRESSES[1], check=False).stdout
        for line in out.splitlines():
            if "min/avg/max" in line:
                return float(line.split("=")[1].split("/")[1]) * 1000 / 2
        sys.exit(f"scaling_links.py: ping across {self.link} failed:\n{out}")

    def launch(self, n):
        hostfile = os.path.join(self.workdir, f"hosts{n}")
        with open(hostfile, "w") as f:
            f.write("".join(f"{a} slots=1\n" for a in ADDRESSES[:n]))
        return ["ip", "netns", "exec", NAMESPACES[0], "mpirun", "--hostfile", hostfile,
                "-np", str(n), "--map-by", "ppr:1:node", "--bind-to", "none",
                "--mca", "plm_rsh_agent", self.agent, "--mca", "routed", "direct",
                "--mca", "btl", "self,tcp",
                "--mca", "btl_tcp_if_include", SUBNET, "--mca", "oob_tcp_if_include", SUBNET]

    def stop_linkem(self):
        if self.proc:
            self.proc.terminate()
            self.proc.communicate(timeout=30)
            self.proc = None
            self.link = None

    def teardown(self):
        self.stop_linkem()
        for ns in NAMESPACES:
            sh("ip", "netns", "del", ns, check=False)


def unavailable():
    why = netns_unavailable(("ip", "ping", "mpirun"))
    if why is None and not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun (graphc-linkem's TUN devices)"
    return why


def latency_bandwidth(launch, probe):
    """(L seconds, B bytes/s) of T = 6 L + S / B, from the median times of the
    communicator's 2-rank allreduces of 1 MiB and 25 MiB: Rabenseifner's 2
    messages on 2 ranks, each over Open MPI's eager limit and so 3 link
    latencies (request, clear-to-send, data), as graphrun --predict costs them."""
    out = subprocess.run(launch + [probe, "bench"], check=True, capture_output=True,
                         text=True).stdout
    times = {}
    for line in out.splitlines():
        for size, prefix in ((25 * MIB, "communicator, f32 mean, 1 tensor"),
                             (MIB, "communicator, f32 mean, 1 MiB")):
            if line.startswith(prefix):
                times[size] = float(line.split("median")[1].split("ms")[0]) / 1000
    if len(times) != 2:
        sys.exit(f"scaling_links.py: no times in graphc-comm-probe's output:\n{out}")
    bandwidth = (25 * MIB - MIB) / max(1e-6, times[25 * MIB] - times[MIB])
    latency = max(0.0, (times[MIB] - MIB / bandwidth) / 6)
    return latency, bandwidth, times


def predict(graphrun, plan, profile, ranks, link, shares, work):
    out = os.path.join(work, "predicted.json")
    subprocess.run([graphrun, plan, "--predict", str(ranks), "--step-profile", profile,
                    "--report", out, "--link", link, *shares], check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)["prediction"]["rows"][0]


def plot(summary, out):
    plt = save_summary(summary, out, "scaling-links")
    rows = [r for r in summary["results"] if r["ranks"] > 1]
    labels = [r["configuration"].replace(", ", "\n") +
              (f"\n{r['bucket_mb']} MiB buckets" if r["link"] != "none" else "") for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.0 * len(rows)), 4.2))
    values = [r["scaling_efficiency"] for r in rows]
    bars = ax.bar(range(len(rows)), values,
                  color=["#2ca02c" if r["link"] == "none" else
                         "#1f77b4" if r["ranks"] == 2 else "#9467bd" for r in rows])
    for key, color, label in (("predicted_efficiency", "#ff9896", "predicted, nominal link"),
                              ("predicted_efficiency_measured_inputs", "#d62728",
                               "predicted, measured link and shares")):
        xs = [i for i, r in enumerate(rows) if r.get(key) is not None]
        if xs:
            ax.scatter(xs, [rows[i][key] for i in xs], marker="_", s=400, color=color,
                       linewidths=2, zorder=3, label=label)
    for bar, v in zip(bars, values):
        ax.text(bar.get_x() + bar.get_width() / 2, v, f"{v:.2f}", ha="center", va="bottom",
                fontsize=8)
    ax.legend(fontsize=7, loc="upper right")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=6.5)
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_ylabel("scaling efficiency (N ranks vs 1)")
    ax.set_ylim(0, 1.15)
    ax.set_title(f"{summary['model']}, batch {summary['batch_per_rank']}/rank, "
                 f"{summary['threads_per_rank']} thread(s)/rank, emulated links: "
                 f"{summary['machine']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scaling-links.png"), dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8, help="batch per rank")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="rounds (median)")
    parser.add_argument("--threads", type=int, default=1, help="threads per rank")
    parser.add_argument("--links", default="1gbit,1gbit:5ms,1gbit:20ms",
                        help="the 2-node rows' links, BANDWIDTH[:ONE-WAY DELAY], comma-separated")
    parser.add_argument("--buckets", default="25,2", help="the 2-node rows' bucket sizes (MiB)")
    parser.add_argument("--four-nodes", default="1gbit,1gbit:5ms",
                        help="the 4-node rows' links (25 MiB buckets); empty for none")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--build", default=os.environ.get("GRAPHC_BUILD_DIR",
                                                          os.path.join(ROOT, "build")))
    args = parser.parse_args()
    why_not = unavailable()
    if why_not:
        sys.exit(f"scaling_links.py: cannot run: {why_not}")
    links2 = [l for l in args.links.split(",") if l]
    links4 = [l for l in args.four_nodes.split(",") if l]
    buckets = sorted({int(b) for b in args.buckets.split(",") if b} | {25}, reverse=True)
    if args.repeats < 1 or args.steps < 1 or not (links2 or links4):
        sys.exit("scaling_links.py: --repeats, --steps and --links or --four-nodes need at "
                 "least one")
    graphc, graphrun = tool("graphc", args.build), tool("graphrun", args.build)
    linkem, probe = tool("graphc-linkem", args.build), tool("graphc-comm-probe", args.build)
    model = os.path.join(ROOT, "models", f"{args.model}.mlir")
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="graphc-links-")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

    plans, wire_mib = {}, {}
    for bucket in buckets:
        plan = os.path.join(work, f"b{bucket}.plan")
        out = subprocess.run([graphc, "compile", model, "--batch-size", str(args.batch),
                              "--lr", "0.01", "--bucket-mb", str(bucket), "-o", plan],
                             check=True, capture_output=True, text=True).stdout
        plans[bucket], wire_mib[bucket] = plan, wire_mebibytes(out, "fp32")
        print(f"compiled {args.model} batch {args.batch}, {bucket} MiB buckets: " +
              "; ".join(l for l in out.splitlines() if l.startswith("data-parallel:")), flush=True)

    configs = [{"name": "1 rank", "ranks": 1, "link": None, "bucket": 25},
               {"name": "2 separate runs", "ranks": 2, "link": "none", "bucket": 25},
               {"name": "4 separate runs", "ranks": 4, "link": "none", "bucket": 25}]
    for link in links2:
        for bucket in buckets:
            configs.append({"name": f"2 nodes, {link_name(link)}", "ranks": 2, "link": link,
                            "bucket": bucket})
    for link in links4:
        configs.append({"name": f"4 nodes, {link_name(link)}", "ranks": 4, "link": link,
                        "bucket": 25})

    nodes = EmulatedNodes(work, linkem)
    run_args = ["--steps", str(args.steps + args.warmup), "--warmup", str(args.warmup),
                "--threads", str(args.threads)]
    measured = {}
    try:
        # Each link as a user measures it before a job.
        load = [graphrun, plans[25], "--steps", "100000", "--warmup", "0",
                "--threads", str(args.threads)]
        timed = [graphrun, plans[25], "--steps", "5", "--warmup", "1",
                 "--threads", str(args.threads)]
        for link in dict.fromkeys(links2 + links4):
            nodes.set_link(link)
            latency, bandwidth, times = latency_bandwidth(nodes.launch(2), probe)
            measured[link] = {"ping_latency_us": nodes.latency_us(),
                              "fitted_latency_us": latency * 1e6, "bytes_per_second": bandwidth,
                              "allreduce_ms": {"1 MiB": times[MIB] * 1e3,
                                               "25 MiB": times[25 * MIB] * 1e3},
                              "shares": {}}
            print(f"{link_name(link)}: ping/2 {measured[link]['ping_latency_us']:.0f} us; "
                  f"allreduce 1 MiB {times[MIB] * 1e3:.1f} ms, 25 MiB "
                  f"{times[25 * MIB] * 1e3:.1f} ms -> latency {latency * 1e6:.0f} us, "
                  f"B {bandwidth / 1e6:.1f} MB/s", flush=True)
            # The shares at each row's number of ranks: 4 ranks on this
            # machine's cores interfere otherwise than 2.
            for n in ([2] if link in links2 else []) + ([4] if link in links4 else []):
                launch = nodes.launch(n)
                alone = times[25 * MIB] if n == 2 else allreduce_seconds(launch, probe)
                busy = min(1.0, alone / allreduce_seconds(launch, probe, load, n))
                computing = min(1.0, compute_share(timed, launch + [probe, "bench"], work, n))
                measured[link]["shares"][n] = {"busy_share": busy, "compute_share": computing}
                print(f"{link_name(link)}, {n} ranks: busy share {busy:.2f}, compute share "
                      f"{computing:.2f}", flush=True)

        for r in range(args.repeats):
            profiles = {}
            for i, c in enumerate(configs):
                plan = plans[c["bucket"]]
                report = os.path.join(work, f"run-{i}.json")
                run = [graphrun, plan, *run_args]
                if c["link"] == "none":
                    # One profiled run while N - 1 others compute beside it
                    # all along (started first, stopped after): its rate
                    # times N. Runs that start and end apart would each
                    # time some steps with the cores less shared.
                    beside = [subprocess.Popen(load, stdout=subprocess.DEVNULL)
                              for _ in range(c["ranks"] - 1)]
                    try:
                        time.sleep(8)  # past loading
                        subprocess.run(run + ["--report", report, "--profile"], check=True,
                                       stdout=subprocess.DEVNULL)
                    finally:
                        for p in beside:
                            p.kill()
                            p.wait()
                    total = c["ranks"] * total_rate([report])
                    profiles[c["ranks"]] = os.path.join(work, f"profile-{c['ranks']}.json")
                    shutil.copyfile(report, profiles[c["ranks"]])
                    c.setdefault("runs", []).append(total)
                    print(f"round {r + 1}/{args.repeats} {c['name']}: {total:.2f} images/sec",
                          flush=True)
                    continue
                if c["ranks"] == 1:
                    subprocess.run(run + ["--report", report, "--profile"], check=True,
                                   stdout=subprocess.DEVNULL)
                    profiles[1] = os.path.join(work, "profile-1.json")
                    shutil.copyfile(report, profiles[1])
                else:
                    nodes.set_link(c["link"])
                    subprocess.run(nodes.launch(c["ranks"]) + run + ["--report", report],
                                   check=True, stdout=subprocess.DEVNULL)
                with open(report) as f:
                    total = json.load(f)["total_images_per_sec"]
                c.setdefault("runs", []).append(total)
                line = f"round {r + 1}/{args.repeats} {c['name']}, {c['bucket']} MiB buckets: " \
                       f"{total:.2f} images/sec"
                if c["ranks"] > 1:
                    m = measured[c["link"]]
                    share = m["shares"][c["ranks"]]
                    # 4 ranks share the cores: their compute as 4 separate runs had it.
                    profile = profiles[4] if c["ranks"] == 4 else profiles[1]
                    rate, _, _ = c["link"].partition(":")
                    nominal = predict(graphrun, plan, profile, c["ranks"],
                                      f"{rate},{m['ping_latency_us']:.0f}us", [], work)
                    shares = ["--busy-share", f"{share['busy_share']:.3f}",
                              "--compute-share", f"{share['compute_share']:.3f}"]
                    inputs = predict(graphrun, plan, profile, c["ranks"],
                                     f"{m['bytes_per_second'] / 1e6:.2f}MB/s,"
                                     f"{m['fitted_latency_us']:.0f}us", shares, work)
                    c.setdefault("predicted", []).append(nominal["total_images_per_sec"])
                    c.setdefault("predicted_inputs", []).append(inputs["total_images_per_sec"])
                    c.setdefault("predicted_exposed_ms", []).append(inputs["exposed_comm_ms"])
                    line += (f", predicted {nominal['total_images_per_sec']:.2f} (nominal), "
                             f"{inputs['total_images_per_sec']:.2f} (measured inputs)")
                print(line, flush=True)
    finally:
        nodes.teardown()
        shutil.rmtree(work, ignore_errors=True)

    base = statistics.median(configs[0]["runs"])
    table = []
    for c in configs:
        total = statistics.median(c["runs"])
        row = {"configuration": c["name"], "ranks": c["ranks"], "link": c["link"] or "-",
               "bucket_mb": c["bucket"], "wire_mib_per_step": wire_mib[c["bucket"]],
               "total_images_per_sec": total, "runs": c["runs"], "speedup": total / base,
               "scaling_efficiency": total / base / c["ranks"],
               "predicted_efficiency": None, "predicted_efficiency_measured_inputs": None}
        if "predicted" in c:
            nominal, inputs = statistics.median(c["predicted"]), statistics.median(
                c["predicted_inputs"])
            row.update({
                "predicted_images_per_sec": nominal, "predicted_runs": c["predicted"],
                "predicted_efficiency": nominal / base / c["ranks"],
                "prediction_error": (nominal - total) / total,
                "predicted_images_per_sec_measured_inputs": inputs,
                "predicted_measured_inputs_runs": c["predicted_inputs"],
                "predicted_efficiency_measured_inputs": inputs / base / c["ranks"],
                "prediction_error_measured_inputs": (inputs - total) / total,
                "predicted_exposed_comm_ms": c["predicted_exposed_ms"]})
        table.append(row)
    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "model": args.model,
               "batch_per_rank": args.batch, "threads_per_rank": args.threads,
               "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats,
               "links": "graphc-linkem (TUN devices, MTU 9000), Open MPI over TCP",
               "measured_links": measured, "results": table}
    print()
    print(f"machine: {summary['machine']}; {args.model}, batch {args.batch} per rank, "
          f"{args.threads} thread(s) per rank; median of {args.repeats} rounds")
    print(f"{'configuration':<28} {'bucket':>7} {'img/s':>7} {'efficiency':>10} "
          f"{'nominal':>8} {'error':>7} {'measured inputs':>16} {'error':>7}")
    for row in table:
        bucket = f"{row['bucket_mb']} MiB" if row["ranks"] > 1 and row["link"] != "none" else "-"
        line = (f"{row['configuration']:<28} {bucket:>7} {row['total_images_per_sec']:>7.2f} "
                f"{row['scaling_efficiency']:>10.3f}")
        if row["predicted_efficiency"] is not None:
            line += (f" {row['predicted_efficiency']:>8.3f} {100 * row['prediction_error']:>6.1f}%"
                     f" {row['predicted_efficiency_measured_inputs']:>16.3f}"
                     f" {100 * row['prediction_error_measured_inputs']:>6.1f}%")
        print(line)
    plot(summary, args.out)
    print(f"\nwrote {os.path.join(args.out, 'scaling-links.json')} and scaling-links.png")


if __name__ == "__main__":
    main()
