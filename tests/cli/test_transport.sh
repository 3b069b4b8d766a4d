#!/usr/bin/env bash
# test_transport.sh: `dflash_rank --mode transport-test` with 2 teachers + 1 student and 1 + 2:
# deterministic payloads from 1 KiB to 64 MiB, each element checked on arrival; every size must
# arrive with 0 wrong elements (the bandwidth column is printed, never asserted).
source "$DFLASH_SRC/tests/cli/lib.sh"
mpi_jobs_without_leak_check
R=$BUILD/dflash_rank
for cfg in "3 --world.students=1" "3 --world.students=2"; do
  set -- $cfg
  np=$1; shift
  expect_ok "transport np $np $*" mpirun -np "$np" "$R" --mode transport-test --device cpu "$@"
  cat "$TMP/out"
  grep -q "all payloads intact (0 wrong elements)" "$TMP/out" && ok || bad "transport-test np $np $*: $(tail -1 "$TMP/out")"
  [ "$(grep -c '^ *[0-9]' "$TMP/out")" -ge 9 ] && ok || bad "transport-test printed fewer sizes than expected"
done
finish
