#!/usr/bin/env bash
# The communicator under `mpirun -np 2` on this machine, for CTest:
#   run_mpi_tests.sh unit    TESTS PROBE [MPIRUN]  graphc-comm-tests on 2 ranks
#   run_mpi_tests.sh stalled TESTS PROBE [MPIRUN]  rank 1 stops (SIGSTOP) before collective #2
#   run_mpi_tests.sh killed  TESTS PROBE [MPIRUN]  rank 1 dies (SIGKILL) before collective #2
#   run_mpi_tests.sh mismatched TESTS PROBE [MPIRUN]  the ranks' collective #2 differ
#   run_mpi_tests.sh device-mismatched TESTS PROBE [MPIRUN]  rank 1 announces collective
#       #2 for a device transport (NCCL's arrival) where rank 0 allreduces it
# Exits 77 (CTest's skip) when there is no mpirun.
#
# What mpirun (Open MPI 4.1.4, without --enable-recovery) does, measured:
#  - a rank that stops is invisible to it: the job would hang, so rank 0's
#    collective timeout ends it (rank 0 exits 1 with the timeout line naming
#    rank 1); mpirun then sends SIGCONT and SIGTERM to rank 1 and exits 1.
#  - a rank killed by SIGKILL: mpirun sends SIGCONT then SIGTERM to the others
#    at once (rank 0's handler prints the line naming the collective and rank 1)
#    and exits 137.
#  - ranks whose buckets differ in size: both see it in the other's arrival
#    message, before any data moves, print what differs and exit 1.
# Asserted: a non-zero exit, in time, and rank 0's line naming rank 1 and the
# collective (for the kill, the SIGTERM line or, should mpirun be slower than
# the timeout, the timeout line).
set -u
mode=$1 tests=$2 probe=$3 mpirun=${4:-}
if [ -z "$mpirun" ] || [ ! -x "$mpirun" ]; then mpirun=$(command -v mpirun || true); fi
if [ -z "$mpirun" ]; then
  echo "SKIP: no mpirun on this machine (Debian: apt-get install openmpi-bin)"
  exit 77
fi
# mpirun refuses to start as root without these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
launch=("$mpirun" -np 2 --oversubscribe --bind-to none)

if [ "$mode" = unit ]; then
  exec timeout -k 5 90 "${launch[@]}" "$tests"
fi

# The collective the probe's rank 1 fails in, as a basic and an extended regex.
name='collective #2 (allreduce of bucket 0 (probe))'
name_ere='collective #2 \(allreduce of bucket 0 \(probe\)\)'
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() { echo "FAIL: $*"; echo "---- output ----"; cat "$log"; exit 1; }

case $mode in
  stalled)
    timeout=2
    start_ms=$(($(date +%s%N) / 1000000))
    timeout -k 5 60 "${launch[@]}" "$probe" stop $timeout >"$log" 2>&1
    rc=$?
    elapsed_ms=$(($(date +%s%N) / 1000000 - start_ms))
    echo "mpirun exited $rc after $elapsed_ms ms"
    [ $rc -ne 0 ] || fail "the job exited 0"
    [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "the job hung (ended by timeout(1))"
    # The timeout plus startup and teardown on a busy 2-core machine.
    [ $elapsed_ms -lt $(((timeout + 20) * 1000)) ] || fail "took $elapsed_ms ms"
    grep -q "^graphrun: rank 0: $name timed out after $timeout s: rank(s) 1 did not arrive$" "$log" ||
      fail "no timeout line from rank 0 naming collective #2 and rank 1"
    ;;
  killed)
    timeout -k 5 60 "${launch[@]}" "$probe" kill >"$log" 2>&1
    rc=$?
    echo "mpirun exited $rc"
    [ $rc -ne 0 ] || fail "the job exited 0"
    [ $rc -ne 124 ] || fail "the job hung (ended by timeout(1))"
    missing='rank\(s\) 1 did not arrive'
    grep -Eq "^graphrun: rank 0: (terminated while waiting in $name_ere: $missing|$name_ere timed out after [0-9.]+ s: $missing)$" "$log" ||
      fail "no line from rank 0 naming collective #2 and rank 1"
    ;;
  mismatched)
    timeout -k 5 60 "${launch[@]}" "$probe" mismatch >"$log" 2>&1
    rc=$?
    echo "mpirun exited $rc"
    [ $rc -ne 0 ] || fail "the job exited 0"
    [ $rc -ne 124 ] || fail "the job hung (ended by timeout(1))"
    grep -q "^graphrun: rank 0: $name does not match rank 1's: allreduce of 1000 elements here, allreduce of 300000 elements there" "$log" ||
      fail "no line from rank 0 saying how collective #2 differs on rank 1"
    ;;
  device-mismatched)
    timeout -k 5 60 "${launch[@]}" "$probe" device-mismatch >"$log" 2>&1
    rc=$?
    echo "mpirun exited $rc"
    [ $rc -ne 0 ] || fail "the job exited 0"
    [ $rc -ne 124 ] || fail "the job hung (ended by timeout(1))"
    grep -q "^graphrun: rank 0: $name does not match rank 1's: allreduce of 1000 elements here, device allreduce of 1000 elements there" "$log" ||
      fail "no line from rank 0 saying that rank 1 announced a device allreduce"
    ;;
  *)
    echo "usage: $0 unit|stalled|killed|mismatched|device-mismatched TESTS PROBE [MPIRUN]"
    exit 2
    ;;
esac
echo "---- output ----"
cat "$log"
echo "PASS"
