#!/bin/sh
# Debian's PoCL 3.1 (LLVM 15) beside the PoCL 3.0 inside PyOpenCL's wheel, without installing it system-wide.
#
# Installing `pocl-opencl-icd` with apt registers a second platform in /etc/OpenCL/vendors that PyOpenCL lists
# first, so `opencl:0` changes device for every process on the machine (docs/traps.md). This script instead
# downloads the .deb files, unpacks them under a prefix (default /work/pocl31) and writes there:
#   vendors/pocl31.icd  naming the unpacked libpocl.so by absolute path;
#   env.sh              the variables that select it: OCL_ICD_VENDORS (PyOpenCL's bundled ocl-icd loader reads
#                       it and lists that PoCL 3.1 first, before the wheel's own PoCL 3.0, which it finds through
#                       PYOPENCL_HOME), LD_LIBRARY_PATH (libhwloc15 and libclang-cpp15, which libpocl.so.2 needs
#                       and this machine lacks), POCL_CACHE_DIR (a kernel cache of its own) and OPENCL_PATH
#                       (tinygrad's ctypes loader: PyOpenCL's bundled libOpenCL, so tinygrad opens the same
#                       platform list without a system `ocl-icd-libopencl1`).
# PoCL 3.1 finds its kernel library and headers relative to libpocl.so (a RELOC build: ../../share/pocl), and
# links kernels in-process; libllvm15 must be installed (it was here; the script downloads it when missing).
#
# Usage:
#   PYTHON=.venv/bin/python sh benchmarks/pocl31.sh [PREFIX]   # download + unpack once (apt-get download)
#   sh benchmarks/pocl31.sh [PREFIX] run CMD ARGS...    # run one command with PoCL 3.1 as opencl:0
#   . PREFIX/env.sh                                     # or select it in the current shell
# Check:  sh benchmarks/pocl31.sh /work/pocl31 run python -c "import fnarray as fa; print(fa.devices('opencl')[0].platform_version)"
set -eu
PREFIX=${1:-/work/pocl31}
case "$PREFIX" in run) PREFIX=/work/pocl31;; *) [ $# -gt 0 ] && shift;; esac
LIB=$PREFIX/root/usr/lib/x86_64-linux-gnu

if [ ! -f "$PREFIX/env.sh" ]; then
    mkdir -p "$PREFIX/debs" "$PREFIX/root" "$PREFIX/vendors" "$PREFIX/kcache"
    cd "$PREFIX/debs"
    pkgs="pocl-opencl-icd libpocl2 libpocl2-common libhwloc15 libclang-cpp15"
    # libllvm15 is usually there already (clang/mesa pull it in); fetch it into the prefix otherwise
    [ -e /usr/lib/x86_64-linux-gnu/libLLVM-15.so.1 ] || pkgs="$pkgs libllvm15"
    # shellcheck disable=SC2086
    apt-get download $pkgs
    for deb in ./*.deb; do dpkg -x "$deb" "$PREFIX/root"; done
    so=$(ls "$LIB"/libpocl.so.2.* | head -n 1)
    echo "$so" > "$PREFIX/vendors/pocl31.icd"
    missing=$(LD_LIBRARY_PATH=$LIB ldd "$so" | grep "not found" || true)
    [ -z "$missing" ] || { echo "still missing for $so:"; echo "$missing"; exit 1; }
    ocl=$(${PYTHON:-python3} - <<'EOF' 2>/dev/null || true
import glob, importlib.util, os
spec = importlib.util.find_spec("pyopencl")
libs = glob.glob(os.path.join(os.path.dirname(spec.origin), ".libs", "libOpenCL*.so*")) if spec else []
print(libs[0] if libs else "")
EOF
)
    cat > "$PREFIX/env.sh" <<EOF
# PoCL 3.1 from $PREFIX as the first OpenCL platform (opencl:0); written by benchmarks/pocl31.sh
export OCL_ICD_VENDORS=$PREFIX/vendors
export LD_LIBRARY_PATH=$LIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export POCL_CACHE_DIR=$PREFIX/kcache
EOF
    [ -z "$ocl" ] || echo "export OPENCL_PATH=\${OPENCL_PATH:-$ocl}" >> "$PREFIX/env.sh"
    echo "wrote $PREFIX/env.sh"
fi

if [ "${1:-}" = run ]; then
    shift
    # shellcheck disable=SC1091
    . "$PREFIX/env.sh"
    exec "$@"
fi
