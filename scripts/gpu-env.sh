# shellcheck shell=bash
# gpu-env.sh: point the build and the runs at the libraries unpacked by scripts/fetch-gpu-deps.sh,
# wherever the tree lies (it can move: nothing in it holds an absolute path that matters).
#
#   source scripts/gpu-env.sh          (bash; GPU_DEPS_DIR picks another folder than .gpu-deps/)
#   cmake -S . -B build-gpu $DFLASH_GPU_CMAKE_ARGS ... && cmake --build build-gpu -j
#   mpirun -np 2 build-gpu/dflash_rank ...
#
# What it sets:
#   .gpu-deps/lib/   made anew on each source: one link per soname, to the tree's copy for the core
#                    packages (Open MPI, PMIx, HDF5, cJSON, OpenBLAS) and, for every other library,
#                    only when the host has none of that soname (ldconfig -p): the host's zlib,
#                    OpenSSL, libgomp ... win, the tree fills the gaps. LD_LIBRARY_PATH starts with it.
#   .gpu-deps/bin/   mpirun, mpiexec, mpicc, ompi_info (the tree's), pkg-config when the host has
#                    none; PATH starts with it (and gets /usr/local/cuda/bin when nvcc is not on it)
#   OPAL_PREFIX      Open MPI relocated to the tree (plugins, help files, orted, wrapper data)
#   OMPI_MCA_*       Debian's /etc/openmpi settings (not relocated: set here), shared-memory copies
#                    without CMA, no ssh needed for one node, running as root allowed
#   PMIX_*           PMIx's plugins and help files in the tree; its hash store (no shared-memory one)
#   PKG_CONFIG_*     only the tree's .pc files, paths prefixed with the tree (sysroot)
#   HDF5_ROOT, CMAKE_PREFIX_PATH, MPI_HOME, DFLASH_GPU_CMAKE_ARGS (adds -DMPI_C_COMPILER, -DHDF5_ROOT)
#   DFLASH_GPU_DEPS  the tree's root; DFLASH_MPIRUN the tree's mpirun
# Programs that need none of this (python3 with torch) can run under `env -u LD_LIBRARY_PATH`, though
# the gap-filling rule means the tree never shadows a library the host has.

_dflash_gpu_env() {
  local repo deps R A L B ldc line cls so rel n_core=0 n_fill=0 n_host=0
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  deps=${GPU_DEPS_DIR:-$repo/.gpu-deps}
  R=$deps/root
  A=x86_64-linux-gnu
  if [ ! -d "$R/usr" ] || [ ! -f "$deps/debs/MANIFEST" ]; then
    echo "gpu-env: $R is missing: run scripts/fetch-gpu-deps.sh (--unpack-only where there is no network)" >&2
    return 1
  fi
  # sonames the host has (64-bit entries of the loader's cache)
  local -A host=()
  ldc=$(command -v ldconfig || echo /sbin/ldconfig)
  [ -x "$ldc" ] || ldc=/usr/sbin/ldconfig
  if [ -x "$ldc" ]; then
    while read -r line; do host[$line]=1; done < <("$ldc" -p 2>/dev/null | awk '/x86-64/ {print $1}')
  fi
  L=$deps/lib
  B=$deps/bin
  rm -rf "$L" "$B"
  mkdir -p "$L" "$B"
  while IFS=$'\t' read -r cls so rel; do
    if [ "$cls" = core ]; then n_core=$((n_core + 1))
    elif [ -n "${host[$so]:-}" ]; then n_host=$((n_host + 1)); continue
    else n_fill=$((n_fill + 1)); fi
    ln -s "$R/$rel" "$L/$so"
  done <"$deps/debs/MANIFEST"
  local t
  for t in mpirun mpiexec mpicc; do ln -s "$R/usr/bin/$t.openmpi" "$B/$t"; done
  ln -s "$R/usr/bin/ompi_info" "$B/ompi_info"
  pkg-config --version >/dev/null 2>&1 || ln -s "$R/usr/bin/pkgconf" "$B/pkg-config"
  if ! nvcc --version >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

  export DFLASH_GPU_DEPS=$R
  export DFLASH_MPIRUN=$B/mpirun
  export PATH=$B:$PATH
  export LD_LIBRARY_PATH=$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OPAL_PREFIX=$R/usr
  # PMIx does not follow OPAL_PREFIX: its plugins (zlib compression ...) and help files by name
  export PMIX_MCA_mca_base_component_path=$R/usr/lib/$A/pmix2/lib/pmix PMIX_PKGDATADIR=$R/usr/lib/$A/pmix2/share/pmix
  export PMIX_MCA_gds=hash
  # /etc/openmpi/openmpi-mca-params.conf of Debian, which the tree cannot relocate
  export OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_mtl='^ofi' OMPI_MCA_btl='^uct,openib,ofi'
  export OMPI_MCA_pml='^ucx' OMPI_MCA_osc='^ucx,pt2pt'
  # one node: no ssh/rsh is needed (Open MPI refuses to start when it finds neither); shared-memory
  # transfers by copy-in/copy-out, which works where CMA (process_vm_readv) is not allowed
  export OMPI_MCA_plm_rsh_agent=false OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export PKG_CONFIG_SYSROOT_DIR=$R
  export PKG_CONFIG_LIBDIR=$R/usr/lib/$A/openblas-openmp/pkgconfig:$R/usr/lib/$A/pkgconfig:$R/usr/share/pkgconfig
  export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
  unset PKG_CONFIG_PATH
  # Debian lays HDF5 out as a prefix of its own, with include/ and lib/ links (FindHDF5 searches only
  # below HDF5_ROOT when it is set)
  export HDF5_ROOT=$R/usr/lib/$A/hdf5/serial MPI_HOME=$R/usr
  export CMAKE_PREFIX_PATH=$R/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export DFLASH_GPU_CMAKE_ARGS="-DMPI_C_COMPILER=$R/usr/bin/mpicc.openmpi -DHDF5_ROOT=$HDF5_ROOT -DCMAKE_PREFIX_PATH=$R/usr -DHDF5_PREFER_PARALLEL=OFF"
  echo "gpu-env: $R: $n_core core libraries, $n_fill filling gaps of the host, $n_host taken from the host"
  # the newest glibc symbol version a file of the tree needs (recorded by fetch-gpu-deps.sh)
  local need have files
  if [ -f "$deps/debs/GLIBC" ] && have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}'); then
    IFS=$'\t' read -r need files <"$deps/debs/GLIBC"
    if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
      echo "gpu-env: warning: this host has glibc $have; $files of the tree need $need (the host's copy is used when it has one)" >&2
    fi
  fi
}
_dflash_gpu_env
