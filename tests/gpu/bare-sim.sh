#!/usr/bin/env bash
# bare-sim.sh CMD [ARGS...]: run a command as if this machine lacked the packages that
# scripts/fetch-gpu-deps.sh bundles (a bare CUDA machine: no Open MPI, PMIx, HDF5, cJSON, OpenBLAS,
# pkg-config, libcurl, ...), to test the unpacked tree and scripts/gpu-env.sh on the development
# machine. Needs root (a private mount namespace): every file those packages installed here is
# hidden (their folders under tmpfs, other files under /dev/null), ssh/rsh and h5cc are hidden too,
# and the loader's cache is rebuilt without them. Nothing outside the command sees any of it.
# Kept: the C library, the compiler and its runtime (libgomp, libatomic, libquadmath), zlib: what a
# CUDA machine that builds C has.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
deps=${GPU_DEPS_DIR:-$repo/.gpu-deps}
[ -s "$deps/debs/PACKAGES" ] || { echo "bare-sim: run scripts/fetch-gpu-deps.sh first" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "bare-sim: needs root (mount namespace)" >&2; exit 1; }
if [ -z "${BARE_SIM_INNER:-}" ]; then
  export BARE_SIM_INNER=1
  exec unshare -m --propagation private "$0" "$@"
fi
keep=" libgomp1 libatomic1 libquadmath0 zlib1g "
dirs=(/usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/lib/x86_64-linux-gnu/hdf5
      /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/x86_64-linux-gnu/openblas-pthread
      /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/x86_64-linux-gnu/openblas-pthread
      /usr/include/hdf5 /usr/include/cjson /usr/share/openmpi /etc/openmpi /usr/lib/x86_64-linux-gnu/ucx
      /usr/lib/x86_64-linux-gnu/libfabric /usr/lib/libpsm1)
for d in "${dirs[@]}"; do [ -d "$d" ] && mount -t tmpfs -o size=1m tmpfs "$d"; done
n=0
while IFS=$'\t' read -r p _ _; do
  case "$keep" in *" $p "*) continue ;; esac
  while IFS= read -r f; do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    for d in "${dirs[@]}"; do case $f in "$d"/*) continue 2 ;; esac; done
    mount --bind /dev/null "$f" && n=$((n + 1))
  done < <(dpkg -L "$p" 2>/dev/null)
done <"$deps/debs/PACKAGES"
for f in /usr/bin/h5cc /usr/bin/ssh /usr/bin/rsh /usr/bin/scp /usr/bin/h5pcc; do
  [ -e "$f" ] && mount --bind /dev/null "$(readlink -f "$f")" && n=$((n + 1))
done
# the loader's cache without the hidden libraries (ldconfig skips files that are not ELF)
cache=$(mktemp -d)
mount -t tmpfs -o size=16m tmpfs "$cache"
ldconfig -X -C "$cache/ld.so.cache" 2>/dev/null # -X: never touch the links on disk (not namespaced)
mount --bind "$cache/ld.so.cache" /etc/ld.so.cache
echo "bare-sim: $n files and ${#dirs[@]} folders hidden; loader cache without them" >&2
unset BARE_SIM_INNER
exec "$@"
