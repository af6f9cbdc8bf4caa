#!/bin/bash
# Runs a command on two "nodes": network namespaces joined by a veth pair, one
# MPI rank in each, Open MPI over TCP (mpirun's remote shell enters the
# namespace of the host it is given). Root only; the namespaces are removed on
# exit, whatever happens.
#
#   two_nodes.sh RATE|- COMMAND...   (RATE: a tc tbf rate such as 1gbit, or - for none)
set -euo pipefail
rate=$1; shift
tag=gl$$
ns=("$tag-a" "$tag-b") dev=("$tag-0" "$tag-1") addr=(10.77.93.1 10.77.93.2)
work=$(mktemp -d)
cleanup() {
  ip netns del "${ns[0]}" 2>/dev/null || true
  ip netns del "${ns[1]}" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "${ns[0]}"
ip netns add "${ns[1]}"
ip link add "${dev[0]}" type veth peer name "${dev[1]}"
for i in 0 1; do
  ip link set "${dev[$i]}" netns "${ns[$i]}"
  ip -n "${ns[$i]}" addr add "${addr[$i]}/24" dev "${dev[$i]}"
  ip -n "${ns[$i]}" link set "${dev[$i]}" up
  ip -n "${ns[$i]}" link set lo up
  if [ "$rate" != - ]; then
    ip netns exec "${ns[$i]}" tc qdisc add dev "${dev[$i]}" root tbf rate "$rate" burst 512kb latency 50ms
  fi
done
printf '%s slots=1\n%s slots=1\n' "${addr[0]}" "${addr[1]}" > "$work/hosts"
cat > "$work/rsh" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in
  ${addr[0]}) ns=${ns[0]} ;;
  ${addr[1]}) ns=${ns[1]} ;;
  *) echo "two_nodes.sh: unknown host \$host" >&2; exit 1 ;;
esac
# Each node's Open MPI daemon gets a session directory of its own: on one
# host (one hostname) they would share /tmp/ompi.HOST.UID, and collide in it
# (a job directory that exists already; hwloc's shared topology written by
# several daemons at once, which crashes one).
mkdir -p "$work/tmp-\$ns"
exec ip netns exec "\$ns" env TMPDIR="$work/tmp-\$ns" sh -c "\$*"
AGENT
chmod +x "$work/rsh"
ip netns exec "${ns[0]}" mpirun --hostfile "$work/hosts" -np 2 --map-by ppr:1:node \
  --bind-to none --mca plm_rsh_agent "$work/rsh" --mca btl self,tcp \
  --mca btl_tcp_if_include 10.77.93.0/24 --mca oob_tcp_if_include 10.77.93.0/24 "$@"
