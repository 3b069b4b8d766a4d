#!/usr/bin/env bash
# fetch-gpu-deps.sh: bring the libraries a bare CUDA machine lacks (Open MPI, HDF5, cJSON, OpenBLAS,
# pkg-config, and whatever shared libraries those need) as Debian packages, unpacked into a folder
# that git ignores, so that tests/gpu/check.sh can build and run dflash_rank there without a package
# manager or a network.
#
#   scripts/fetch-gpu-deps.sh                 download what is missing into .gpu-deps/debs/ (needs
#                                             apt and a network: run it on the development machine),
#                                             then unpack into .gpu-deps/root/ and check the tree
#   scripts/fetch-gpu-deps.sh --unpack-only   no network: unpack the .debs already in .gpu-deps/debs/
#                                             (what check.sh does on the GPU machine)
#   GPU_DEPS_DIR=DIR ...                      another folder than .gpu-deps/
#
# Idempotent: a .deb already downloaded (same version) is not fetched again, and the tree is unpacked
# again only when the set of .debs changed. It prints what it fetched and what the tree needs from
# the host (glibc version, libraries it does not bring).
#
# What travels to the GPU machine is .gpu-deps/debs/ (compressed; ~32 MiB): name it in the device
# tool's `carry`. scripts/gpu-env.sh (sourced) then points PATH, LD_LIBRARY_PATH, OPAL_PREFIX,
# pkg-config and CMake at the unpacked tree, wherever it lies.
#
# The packages come from this machine's apt sources (Debian 12 bookworm here, amd64). They are meant
# for a glibc distribution at least as new (Debian 12, Ubuntu 24.04): the tree's binaries need the
# glibc version printed at the end (2.36, for libevent_core only; the rest needs <= 2.34, so on
# Ubuntu 22.04, glibc 2.35, the tree works only where the host has its own libevent). The host must provide libc6, libgcc-s1, libstdc++6 and a C
# compiler with OpenMP (gcc): these are never bundled. Every other library is bundled; gpu-env.sh
# uses the host's copy of a library whenever the host has one of the same soname (e.g. zlib,
# OpenSSL), and the bundled one only to fill a gap, except for the "core" packages (Open MPI, PMIx,
# HDF5, cJSON, OpenBLAS), which always come from the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
deps=${GPU_DEPS_DIR:-$repo/.gpu-deps}
debs=$deps/debs
root=$deps/root
arch=amd64
triplet=x86_64-linux-gnu

unpack_only=0
for a in "$@"; do
  case $a in
    --unpack-only) unpack_only=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "fetch-gpu-deps: unknown argument '$a' (see --help)" >&2; exit 2 ;;
  esac
done

# The packages named here; their dependencies are added (first alternative of each), except the -dev
# packages, whose own dependencies (compilers, other -dev packages) are not needed to build against
# the headers and .so links they carry.
core_runtime=(openmpi-bin libopenmpi3 openmpi-common libpmix2 libhdf5-103-1 libcjson1 libopenblas0-openmp)
core_dev=(libopenmpi-dev libhdf5-dev libcjson-dev libopenblas-openmp-dev)
extra=(pkgconf pkgconf-bin libpkgconf3)   # pkg-config, in case the host has none
# Never bundled, never followed: the C library and the compiler's runtime (must match the host's
# compiler; libgomp too: the host gcc that has OpenMP has it, and one process must not load two),
# and packaging/system machinery no library of ours links at run time. libhwloc-plugins
# (hwloc's optional X11/OpenCL/NVML discovery, dlopen'ed from a fixed path) is left out too.
deny=" libc6 libgcc-s1 libstdc++6 gcc-12-base libcrypt1 debconf cdebconf debconf-2.0 adduser dpkg install-info tar
  passwd perl-base readline-common libreadline8 libtinfo6 openssh-client ssh-client libedit2 libfido2-1 libcbor0.8
  libpam0g libpam-modules libpam-modules-bin libaudit1 libaudit-common libcap-ng0 libselinux1 libsemanage2
  libsemanage-common libsepol2 libpcre2-8-0 libdebian-installer4 libnewt0.52 libslang2 libtextwrap1
  libhwloc-plugins libxnvctrl0 ocl-icd-libopencl1 libx11-6 libx11-data libxau6 libxcb1 libxdmcp6 libxext6
  libpciaccess0 libxml2 libicu72 libbsd0 libmd0 libjs-jquery libjs-jquery-ui libgomp1 "
core_pkgs=" ${core_runtime[*]} ${core_dev[*]} "

# Deb file of a package in $debs, if any.
deb_of() { local f; for f in "$debs/$1"_*_"$arch".deb "$debs/$1"_*_all.deb; do [ -e "$f" ] && { echo "$f"; return 0; }; done; return 1; }

if [ "$unpack_only" -eq 0 ]; then
  command -v apt-get >/dev/null && command -v apt-cache >/dev/null ||
    { echo "fetch-gpu-deps: needs apt-get (a Debian/Ubuntu machine with a network)" >&2; exit 1; }
  [ "$(dpkg --print-architecture)" = "$arch" ] ||
    { echo "fetch-gpu-deps: this machine is $(dpkg --print-architecture), the GPU machine is $arch: run it on an $arch machine" >&2; exit 1; }
  if ! apt-cache show --no-all-versions libopenmpi3 >/dev/null 2>&1; then
    echo "fetch-gpu-deps: apt lists lack libopenmpi3: apt-get update"
    if [ "$(id -u)" -eq 0 ]; then apt-get update -q; else sudo apt-get update -q; fi
  fi
  . /etc/os-release
  echo "fetch-gpu-deps: resolving from ${PRETTY_NAME:-the apt sources} ($arch)"

  # Resolve: breadth-first over Pre-Depends/Depends, one apt-cache call per level.
  # show_level P...: one line per real package: NAME<TAB>VERSION<TAB>DEPENDS (Pre-Depends first)
  show_level() {
    apt-cache show --no-all-versions "$@" 2>/dev/null | awk '
      /^Package:/ {p = $2; v = ""; d = ""}
      /^Version:/ {v = $2}
      /^(Pre-Depends|Depends):/ {sub(/^[^:]*: */, ""); d = d $0 ", "}
      /^$/ && p != "" {print p "\t" v "\t" d; p = ""}
      END {if (p != "") print p "\t" v "\t" d}' || true
  }
  declare -A seen=() version=()
  queue=("${core_runtime[@]}" "${core_dev[@]}" "${extra[@]}")
  for p in "${queue[@]}"; do seen[$p]=1; done
  order=()
  while [ ${#queue[@]} -gt 0 ]; do
    next=()
    declare -A found=()
    while IFS=$'\t' read -r p v dl; do
      [ -n "${found[$p]:-}" ] && continue # several versions listed: the first is the candidate
      found[$p]=1; version[$p]=$v; order+=("$p")
      case " ${core_dev[*]} " in *" $p "*) continue ;; esac
      IFS=',' read -ra groups <<<"$dl"
      for g in "${groups[@]}"; do
        g=${g%%|*}; g=${g%%[(]*}; g=${g%%:*}; g=$(echo "$g" | xargs)
        [ -n "$g" ] || continue
        case "$deny" in *" $g "*) continue ;; esac
        [ -n "${seen[$g]:-}" ] && continue
        seen[$g]=1; next+=("$g")
      done
    done < <(show_level "${queue[@]}")
    # a name apt-cache did not show is virtual (or unknown): take its first provider
    queue=()
    for p in "${next[@]}"; do queue+=("$p"); done
    for p in "${order[@]}"; do :; done
    unset found
    # check the previous level: every name asked for must have been shown or be provided
  done
  for p in "${core_runtime[@]}" "${core_dev[@]}" "${extra[@]}"; do
    [ -n "${version[$p]:-}" ] || { echo "fetch-gpu-deps: no package '$p' in the apt sources" >&2; exit 1; }
  done
  for p in "${!seen[@]}"; do
    [ -n "${version[$p]:-}" ] && continue
    prov=$(apt-cache showpkg "$p" 2>/dev/null | awk '/^Reverse Provides:/ {f=1; next} f && NF {print $1; exit}')
    if [ -z "$prov" ]; then echo "fetch-gpu-deps: warning: '$p' has no package: skipped" >&2; continue; fi
    case "$deny" in *" $prov "*) continue ;; esac
    [ -n "${version[$prov]:-}" ] && continue
    echo "fetch-gpu-deps: warning: virtual '$p' is provided by '$prov', which is not followed: add it to the lists" >&2
  done

  mkdir -p "$debs"
  fetched=() kept=()
  : >"$debs/PACKAGES.new"
  for p in "${order[@]}"; do
    v=${version[$p]}
    cls=fill; case "$core_pkgs" in *" $p "*) cls=core ;; esac
    printf '%s\t%s\t%s\n' "$p" "$v" "$cls" >>"$debs/PACKAGES.new"
    if f=$(deb_of "$p") && [ "$(dpkg-deb -f "$f" Version)" = "$v" ]; then kept+=("$p"); continue; fi
    [ -n "${f:-}" ] && rm -f "$f"
    fetched+=("$p=$v")
  done
  if [ ${#fetched[@]} -gt 0 ]; then
    (cd "$debs" && apt-get download -q "${fetched[@]}" >/dev/null 2>"$debs/.err") ||
      { cat "$debs/.err" >&2; echo "fetch-gpu-deps: apt-get download failed" >&2; exit 1; }
  fi
  rm -f "$debs/.err"
  # drop .debs of packages no longer in the list
  for f in "$debs"/*.deb; do
    n=$(dpkg-deb -f "$f" Package)
    awk -v n="$n" '$1 == n {found = 1} END {exit !found}' "$debs/PACKAGES.new" || { echo "fetch-gpu-deps: removing $(basename "$f") (no longer needed)"; rm -f "$f"; }
  done
  mv "$debs/PACKAGES.new" "$debs/PACKAGES"
  echo "fetch-gpu-deps: ${#order[@]} packages: ${#fetched[@]} downloaded, ${#kept[@]} already here"
  [ ${#fetched[@]} -eq 0 ] || printf '  fetched %s\n' "${fetched[@]}"
fi

# ------------------------------------------------------------------ unpack
[ -s "$debs/PACKAGES" ] || { echo "fetch-gpu-deps: $debs/PACKAGES missing: run scripts/fetch-gpu-deps.sh on a machine with apt and a network first" >&2; exit 1; }
while IFS=$'\t' read -r p v cls; do
  deb_of "$p" >/dev/null || { echo "fetch-gpu-deps: $debs lacks the .deb of $p ($v)" >&2; exit 1; }
done <"$debs/PACKAGES"

# extract DEB DIR: dpkg-deb where there is one, else Python (an ar archive holding data.tar.*).
extract() {
  if dpkg-deb --version >/dev/null 2>&1; then dpkg-deb -x "$1" "$2"; return; fi
  python3 - "$1" "$2" <<'EOF'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not a .deb"
off = 8
while off < len(data):
    name = data[off:off + 16].decode().strip().rstrip("/")
    size = int(data[off + 48:off + 58].decode().strip())
    body = data[off + 60:off + 60 + size]
    off += 60 + size + (size & 1)
    if name.startswith("data.tar"):
        if name.endswith(".zst"):
            import zstandard
            body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read()
            name = "data.tar"
        kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
        tarfile.open(fileobj=io.BytesIO(body), mode="r:*").extractall(sys.argv[2], **kw)
        break
EOF
}

stamp=$( (cat "$debs/PACKAGES"; ls -l "$debs"/*.deb | awk '{print $5, $NF}' | sed "s|$debs/||") | cksum | cut -d' ' -f1)
if [ -f "$root/.stamp" ] && [ "$(cat "$root/.stamp")" = "$stamp" ] && [ -f "$debs/MANIFEST" ]; then
  echo "fetch-gpu-deps: $root is up to date ($(wc -l <"$debs/PACKAGES") packages)"
  exit 0
fi
echo "fetch-gpu-deps: unpacking $(wc -l <"$debs/PACKAGES") packages into $root"
rm -rf "$root.tmp"
mkdir -p "$root.tmp"
while IFS=$'\t' read -r p v cls; do extract "$(deb_of "$p")" "$root.tmp"; done <"$debs/PACKAGES"
R=$root.tmp
# What nothing here needs: documentation, manual pages, static libraries, Fortran/C++/Java bindings.
rm -rf "$R"/usr/share/doc "$R"/usr/share/man "$R"/usr/share/lintian "$R"/usr/share/info "$R"/usr/share/locale
find "$R" -name '*.a' -delete
find "$R" \( -name '*.mod' -o -name 'libmpi_java*' -o -name 'mpi.jar' \) -delete
# Absolute symlinks (/usr/...) become relative ones inside the tree, so that it can move.
while IFS= read -r l; do
  t=$(readlink "$l")
  case $t in /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$R$t")" "$l" ;; esac
done < <(find "$R" -type l)
# What Debian's alternatives system would have made (update-alternatives runs at install, not unpack).
for t in mpirun mpiexec mpicc ; do [ -e "$R/usr/bin/$t.openmpi" ] && ln -sfn "$t.openmpi" "$R/usr/bin/$t"; done
[ -e "$R/usr/lib/$triplet/openblas-openmp/libopenblas.so.0" ] &&
  ln -sfn openblas-openmp/libopenblas.so.0 "$R/usr/lib/$triplet/libopenblas.so.0"

# MANIFEST: every shared library a program of ours can load by soname, with its class (core: always
# the tree's; fill: the host's when it has that soname). Plugins (Open MPI's and PMIx's components,
# loaded by path) are not listed.
if [ "$unpack_only" -eq 0 ] || [ ! -f "$debs/MANIFEST" ]; then
  command -v readelf >/dev/null || { echo "fetch-gpu-deps: readelf (binutils) is needed to index the tree" >&2; exit 1; }
  : >"$debs/MANIFEST.new"
  declare -A cls_of=()
  while IFS=$'\t' read -r p v cls; do
    while IFS= read -r f; do [ -n "$f" ] && cls_of[$f]=$cls; done < <(dpkg-deb -c "$(deb_of "$p")" | awk '{print $6}' | sed 's|^\./||')
  done <"$debs/PACKAGES"
  for d in usr/lib/$triplet lib/$triplet usr/lib/$triplet/openblas-openmp usr/lib/$triplet/pmix2/lib usr/lib/libpsm1; do
    [ -d "$R/$d" ] || continue
    for f in "$R/$d"/*.so*; do
      [ -f "$f" ] && [ ! -L "$f" ] || continue
      so=$(readelf -d "$f" 2>/dev/null | awk '/SONAME/ {gsub(/[][]/, "", $5); print $5}')
      [ -n "$so" ] || continue
      rel=${f#"$R"/}
      printf '%s\t%s\t%s\n' "${cls_of[$rel]:-fill}" "$so" "$rel" >>"$debs/MANIFEST.new"
    done
  done
  sort -u -k2,2 "$debs/MANIFEST.new" >"$debs/MANIFEST" && rm -f "$debs/MANIFEST.new"
fi

# Check the tree (here, not on the GPU machine): every library an ELF file needs is in the tree or is
# one the host must have. Libraries needed only by the Open MPI components that gpu-env.sh turns off
# (UCX, libfabric, PSM, verbs) or by plugins nothing loads are reported as notes.
if [ "$unpack_only" -eq 0 ] && command -v readelf >/dev/null; then
  host_libs=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 libutil.so.1 libanl.so.1
    ld-linux-x86-64.so.2 libgcc_s.so.1 libstdc++.so.6 libgomp.so.1 "
  declare -A have=()
  while IFS=$'\t' read -r _ so _; do have[$so]=1; done <"$debs/MANIFEST"
  declare -A missing=() glibc_of=()
  glibc_max=0
  while IFS= read -r f; do
    head -c 4 "$f" 2>/dev/null | grep -q 'ELF' || continue
    while IFS= read -r n; do
      case "$host_libs" in *" $n "*) continue ;; esac
      [ -n "${have[$n]:-}" ] || missing[$n]+="${f#"$R"/} "
    done < <(readelf -d "$f" 2>/dev/null | awk '/NEEDED/ {gsub(/[][]/, "", $5); print $5}')
    g=$(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1 || true)
    [ -n "$g" ] && glibc_max=$(printf '%s\n%s\n' "$glibc_max" "$g" | sort -V | tail -1) && glibc_of[$g]+="${f##*/} "
  done < <(find "$R" -type f \( -name '*.so*' -o -perm -u+x \))
  echo "fetch-gpu-deps: the tree needs glibc >= $glibc_max from the host (and libgcc_s, libstdc++, libgomp);" \
    "$glibc_max for: $(echo ${glibc_of[$glibc_max]} | cut -c1-200)"
  printf '%s\t%s\n' "$glibc_max" "$(echo ${glibc_of[$glibc_max]})" >"$debs/GLIBC"
  for n in "${!missing[@]}"; do
    echo "fetch-gpu-deps: note: $n is not in the tree, needed by: $(echo ${missing[$n]} | cut -c1-160)"
  done
fi
echo "$stamp" >"$R/.stamp"
rm -rf "$root"
mv "$R" "$root"
echo "fetch-gpu-deps: $root ready: $(du -sh "$root" | cut -f1) unpacked, $(du -ch "$debs"/*.deb | tail -1 | cut -f1) of .debs, $(wc -l <"$debs/MANIFEST") libraries indexed"
