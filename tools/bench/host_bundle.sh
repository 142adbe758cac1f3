#!/bin/bash
# host_bundle.sh OUT_DIR [BUILD_DIR]: packs Starling's release benchmarks with the Debian 12 shared
# libraries they need (UCX 1.13, Open MPI 4.1 with its plugins, PMIx) into OUT_DIR, so that the
# side-by-side benchmarks (bench-gossip with its Open MPI columns, bench-codecs) can run on a host
# that is not Debian 12 and has none of them: a lent many-core machine, say. glibc, libstdc++ and
# libgcc stay the host's (they are backward compatible; Debian's would shadow the host's own).
#
# On the other host, from the directory that holds OUT_DIR (as root, on a throwaway machine):
#   source OUT_DIR/env.sh   # PATH, LD_LIBRARY_PATH, and UCX's, Open MPI's and PMIx's plugin
#                           # directories, all inside the bundle
#   bench-gossip --peers 4,8,16 --dims 1e3,1e5,1e6,1e7 --repeat 3
# docs/bench_gossip.md ("A host with a core per peer") has what it measured.
set -euo pipefail
out=${1:?usage: host_bundle.sh OUT_DIR [BUILD_DIR]}
build=${2:-build-release}
rm -rf "$out"; mkdir -p "$out/bin" "$out/lib" "$out/root"
pkgs="libopenmpi3 openmpi-bin openmpi-common libpmix2 libucx0"
mapfile -t files < <(dpkg -L $pkgs | grep -v '/doc/\|/man/\|/lintian/' |
                     while read -r f; do [[ -f $f || -L $f ]] && echo "$f"; done)
# Open MPI, PMIx and UCX's module directories go to their own paths (compiled into the libraries).
for f in "${files[@]}"; do
  case $f in
    /usr/lib/x86_64-linux-gnu/openmpi/*|/usr/lib/x86_64-linux-gnu/pmix2/*|/usr/share/openmpi/*|\
    /usr/share/pmix/*|/etc/openmpi/*|/usr/lib/x86_64-linux-gnu/ucx/*)
      mkdir -p "$out/root$(dirname "$f")" && cp -a "$f" "$out/root$f" ;;
  esac
done
cp -aL /usr/bin/orterun "$out/bin/mpirun"; cp -aL /usr/bin/orted "$out/bin/"
for t in bench-gossip bench-gossip-mpi bench-codecs bench-simulate node-launcher bench-frontdoor-mix; do
  [[ -x $build/tools/$t ]] && cp -a "$build/tools/$t" "$out/bin/"
done
# Every shared library any of them loads, but the C and C++ runtimes.
for f in "${files[@]}" "$out"/bin/*; do
  file -L "$f" | grep -q ELF || continue
  ldd "$f" 2>/dev/null | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
    *) cp -aL "$lib" "$out/lib/" ;;
  esac
done
cat > "$out/env.sh" <<'ENV'
# Sourced on the other host: see host_bundle.sh. Nothing is written outside the bundle: Open MPI
# and PMIx are pointed at its plugins by their own variables, since a host may have another
# Open MPI in the very directories Debian's was built for (Ubuntu 24.04 has).
_b=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_r=$_b/root/usr/lib/x86_64-linux-gnu
export PATH=$_b/bin:$PATH LD_LIBRARY_PATH=$_b/lib:$_r/openmpi/lib:$_r/pmix2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=$_r/ucx
export OMPI_MCA_mca_base_component_path=$_r/openmpi/lib/openmpi3
export PMIX_MCA_mca_base_component_path=$_r/pmix2/lib/pmix
export OMPI_MCA_mca_base_param_files=$_b/root/etc/openmpi/openmpi-mca-params.conf
export OPAL_PKGDATADIR=$_b/root/usr/share/openmpi
ENV
du -sh "$out"
