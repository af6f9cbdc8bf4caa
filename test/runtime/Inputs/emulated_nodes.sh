#!/bin/bash
# Runs a command on N "nodes": network namespaces joined by graphc-linkem's
# emulated link (a bandwidth and a one-way delay each way, through TUN
# devices), one MPI rank in each, Open MPI over TCP (mpirun's remote shell
# enters the namespace of the host it is given). Root only; the namespaces
# and the emulator are gone on exit, whatever happens; the emulator's counts
# of packets sent, received and dropped per node then go to stderr.
#
#   emulated_nodes.sh N BANDWIDTH[,DELAY] COMMAND...   (e.g. 2 1gbit,5ms graphrun ...)
#
# graphc-linkem is taken from $GRAPHC_LINKEM, else from PATH. The devices' MTU
# is 9000 (jumbo frames, as cluster networks run them).
set -euo pipefail
n=$1 link=$2; shift 2
linkem=${GRAPHC_LINKEM:-graphc-linkem}
tag=ge$$
work=$(mktemp -d)
pid=
ns=() dev=() addr=() ports=()
for ((i = 0; i < n; ++i)); do
  ns+=("$tag-n$i") dev+=("$tag-t$i") addr+=("10.77.94.$((i + 1))")
  ports+=("$tag-t$i=10.77.94.$((i + 1))")
done
cleanup() {
  # graphc-linkem's own lines (ready; what each port sent, received, dropped)
  # go to stderr once it has stopped.
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    cat "$work/linkem.out" >&2 || true
  fi
  for s in "${ns[@]}"; do ip netns del "$s" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
"$linkem" --link "$link" "${ports[@]}" > "$work/linkem.out" &
pid=$!
for ((t = 0; t < 100; ++t)); do
  grep -q ready "$work/linkem.out" && break
  kill -0 "$pid" 2>/dev/null || { echo "emulated_nodes.sh: graphc-linkem failed" >&2; exit 1; }
  sleep 0.05
done
grep -q ready "$work/linkem.out" || { echo "emulated_nodes.sh: graphc-linkem not ready" >&2; exit 1; }
: > "$work/hosts"
cases=
for ((i = 0; i < n; ++i)); do
  ip netns add "${ns[$i]}"
  ip link set "${dev[$i]}" netns "${ns[$i]}"
  ip -n "${ns[$i]}" addr add "${addr[$i]}/24" dev "${dev[$i]}"
  ip -n "${ns[$i]}" link set "${dev[$i]}" mtu 9000 up
  ip -n "${ns[$i]}" link set lo up
  echo "${addr[$i]} slots=1" >> "$work/hosts"
  cases+="  ${addr[$i]}) ns=${ns[$i]} ;;"$'\n'
done
cat > "$work/rsh" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in
$cases  *) echo "emulated_nodes.sh: unknown host \$host" >&2; exit 1 ;;
esac
# Each node's Open MPI daemon gets a session directory of its own: on one
# host (one hostname) they would share /tmp/ompi.HOST.UID, and collide in it
# (a job directory that exists already; hwloc's shared topology written by
# several daemons at once, which crashes one).
mkdir -p "$work/tmp-\$ns"
exec ip netns exec "\$ns" env TMPDIR="$work/tmp-\$ns" sh -c "\$*"
AGENT
chmod +x "$work/rsh"
ip netns exec "${ns[0]}" mpirun --hostfile "$work/hosts" -np "$n" --map-by ppr:1:node \
  --bind-to none --mca plm_rsh_agent "$work/rsh" --mca routed direct --mca btl self,tcp \
  --mca btl_tcp_if_include 10.77.94.0/24 --mca oob_tcp_if_include 10.77.94.0/24 "$@"
