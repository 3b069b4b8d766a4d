# mpi_keepalive.sh: sourced by the launch scripts (mpirun_stop.sh, slurm/dflash.sbatch): Open MPI's
# daemons notice a host that dropped off the network within about 30 s, so that mpirun ends the job
# rather than wait for that host's daemon for minutes (docs/distributed.md, "Several hosts").
#
# A host cut off the network (its link down, its switch port dead, the machine frozen) takes its
# daemon with it. mpirun learns of it from the TCP keepalive on its connection to that daemon, whose
# Open MPI defaults are 300 s idle then 9 probes 20 s apart (8 minutes); and once a rank has timed
# out (run.rank_timeout) and mpirun has sent the lost daemon the order to end its ranks, that order
# sits unacknowledged on the connection, the keepalive no longer runs, and mpirun waits on TCP's
# retransmissions (about 15 minutes). So the keepalive must notice the lost host first: 10 s idle,
# then 4 probes 5 s apart = 30 s, well under the default run.rank_timeout (600 s; keep it above
# this). Values already set in the environment (a site's) are kept. Open MPI 4 (ORTE) reads
# OMPI_MCA_oob_tcp_keepalive_*; Open MPI 5's runtime (PRRTE) reads the same names as PRTE_MCA_*
# (`ompi_info --all | grep keepalive`, `prte_info --all | grep keepalive` show them).
for _dflash_ka in time:10 intvl:5 probes:4; do
  _dflash_var=oob_tcp_keepalive_${_dflash_ka%%:*}
  for _dflash_pfx in OMPI_MCA_ PRTE_MCA_; do
    [ -n "$(eval "echo \${$_dflash_pfx$_dflash_var:-}")" ] || export "$_dflash_pfx$_dflash_var=${_dflash_ka#*:}"
  done
done
unset _dflash_ka _dflash_var _dflash_pfx
