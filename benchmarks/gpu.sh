#!/usr/bin/env bash
# GPU evidence in one prepared run (issue 28 item 7): on a machine with an NVIDIA GPU, from the repository root,
#
#   bash benchmarks/gpu.sh [OUT_DIR]            # the real run (OUT_DIR defaults to gpu-results/)
#   bash benchmarks/gpu.sh --dry-run [OUT_DIR]  # the same steps on the CPU, small sizes: checks the script here
#
# It makes sure JAX sees the GPU (installing JAX's CUDA wheels where pip reaches an index and the installed JAX
# has no GPU), installs fnarray's own requirements where missing, says whether NVIDIA's OpenCL and Vulkan drivers
# are there for the opencl and webgpu backends (installing pyopencl / wgpu where they are and pip can), runs the
# parity suite on jax:0 (the GPU), benchmarks/backend_vs_raw.py and benchmarks/programs.py there, and writes
# everything to OUT_DIR/results.md (plus one log per step). Each step's failure is recorded and the run goes on.
# The figures go into docs/performance.md by hand.
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0
if [ "${1:-}" = "--dry-run" ]; then dry=1; shift; fi
out=${1:-gpu-results}
mkdir -p "$out"
res="$out/results.md"
py=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1
if [ $dry = 1 ]; then export JAX_PLATFORMS=cpu; fi

note() { echo "$*" | tee -a "$res"; }
step() {  # step NAME TIMEOUT COMMAND...: run, log to OUT_DIR/NAME.log, record the exit status
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  note "- $name: exit $rc in $(( $(date +%s) - t0 )) s (log: $name.log)"
  return $rc
}
have_py() { "$py" -c "import $1" >/dev/null 2>&1; }
pip_ok() { "$py" -m pip download --no-deps -q -d "$(mktemp -d)" "$1" >/dev/null 2>&1; }

: >"$res"
note "# fnarray GPU run, $(date -u +%Y-%m-%dT%H:%MZ)$([ $dry = 1 ] && echo ' (dry run on the CPU)')"
note ""
note "## Machine"
if command -v nvidia-smi >/dev/null; then
  note "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
else
  note "- GPU: none (nvidia-smi not found)$([ $dry = 0 ] && echo ': this run measures the CPU only')"
fi
note "- python: $("$py" --version 2>&1), load average: $(cut -d' ' -f1-3 /proc/loadavg)"

note ""
note "## Set-up"
for mod in numpy optree ml_dtypes; do
  if ! have_py "$mod"; then
    "$py" -m pip install -q "$mod" >>"$out/setup.log" 2>&1 && note "- installed $mod" || note "- MISSING $mod (no index reachable?)"
  fi
done
jax_gpu() { "$py" -c "import jax,sys; sys.exit(0 if any(d.platform=='gpu' for d in jax.devices()) else 1)" 2>/dev/null; }
if [ $dry = 0 ] && ! jax_gpu; then
  if pip_ok "jax[cuda12]"; then
    "$py" -m pip install -q -U "jax[cuda12]" >>"$out/setup.log" 2>&1 && note "- installed jax[cuda12]"
  else
    note "- JAX sees no GPU and no package index is reachable to install jax[cuda12]"
  fi
fi
note "- JAX: $("$py" -c 'import jax; print(jax.__version__, jax.devices())' 2>&1 | tail -1)"
if [ -e /etc/OpenCL/vendors/nvidia.icd ] || ls /usr/local/nvidia/lib*/libnvidia-opencl* >/dev/null 2>&1; then
  have_py pyopencl || "$py" -m pip install -q pyopencl >>"$out/setup.log" 2>&1 || true
  note "- OpenCL: NVIDIA's driver present; pyopencl $(have_py pyopencl && echo importable || echo 'missing (no index)')"
else
  note "- OpenCL: no NVIDIA OpenCL driver (no /etc/OpenCL/vendors/nvidia.icd): the opencl backend is not measured"
fi
if ldconfig -p 2>/dev/null | grep -q libvulkan && ls /usr/share/vulkan/icd.d/nvidia* /usr/local/nvidia/share/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
  have_py wgpu || "$py" -m pip install -q wgpu >>"$out/setup.log" 2>&1 || true
  note "- Vulkan: NVIDIA's driver present; wgpu $(have_py wgpu && echo importable || echo 'missing (no index)')"
else
  note "- Vulkan: no loader or no NVIDIA ICD: the webgpu backend is not measured"
fi
note "- fnarray devices: $("$py" -c 'import fnarray as fa; print(fa.devices(all_backends=True))' 2>&1 | tail -1)"

note ""
note "## Steps"
if [ $dry = 1 ]; then
  parity_k="jax and (add or dot_general or reduce_sum or threefry)"; size=$((1 << 18)); reps=1
else
  parity_k="jax"; size=$((1 << 24)); reps=2
fi
have_py pytest || "$py" -m pip install -q pytest >>"$out/setup.log" 2>&1 || true
step parity 1800 "$py" -m pytest -q -p no:cacheprovider tests/test_parity.py -k "$parity_k"
step backend_vs_raw 1200 "$py" benchmarks/backend_vs_raw.py --device jax:0 --size "$size" --repeat 3
step programs 1800 "$py" benchmarks/programs.py --device jax:0 --repeats "$reps"

note ""
note "## Results"
note '```'
tail -n 3 "$out/parity.log" | tee -a "$res"
note ""
cat "$out/backend_vs_raw.log" >>"$res"
note ""
cat "$out/programs.log" >>"$res"
note '```'
echo "wrote $res"
