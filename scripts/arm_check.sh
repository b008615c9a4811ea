#!/usr/bin/env bash
# Linux ARM64 end to end, from an x86-64 Debian 12 machine, as root, with Debian packages and PyPI only: what a student
# with an ARM laptop or a cloud ARM machine does (README, "Install on your machine"), in an arm64 Debian root that
# qemu-user runs (emulated: correctness only, no speed; NOTES 42):
#   cross  - tests/platforms/test_arm.py: uopc's kernels, tiled for NEON, compiled by aarch64-linux-gnu-gcc with the flags
#            uopc uses on ARM (uopc.runtime.machine's table)                                               ~3 min
#   root   - an arm64 Debian 12 root (debootstrap) run through qemu-user-static + binfmt, with python3, gcc, make,
#            git and Debian's PoCL (the OpenCL platform there: pip's PoCL has no ARM64 wheel)           ~10 min
#   setup  - `make setup` in a clone of the repository inside it: requirements.lock as it is (its markers leave out
#            the x86-64-only PoCL and Oclgrind wheels), hashes required                                  ~15 min
#   demo   - `make demo` there
#   test   - pytest on $TESTS (vector kernels and GEMMs, attention, the GPT's step) under emulation
# Usage:  bash arm_check.sh [cross] [root] [setup] [demo] [test]     (no argument: root setup demo test)
#   REPO=<checkout>  WORK=<scratch folder>  TESTS="tests/spine/test_ch05_render.py"  PYTEST_ARGS="-n 2 --dist loadfile"
# Every stage is skipped where its result is already there; mounts are undone on exit. The root's clone follows the
# checkout's committed HEAD. The whole suite would take hours under emulation: run a subset. Times: NOTES 42.
set -euo pipefail
REPO=${REPO:-$(git rev-parse --show-toplevel 2>/dev/null || pwd)}
WORK=${WORK:-${TMPDIR:-/tmp}/uopc-arm}
ROOT=$WORK/root
# the Debian mirror this machine's apt already uses (first deb line of its sources)
# (only the files apt reads: *.list and *.sources, and only Debian's archive, not a third party's repository)
MIRROR=${MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
  2>/dev/null | grep -oE '^(deb|URIs:)\s+\S+' | awk '{print $2}' | grep -E '/debian/?$' | head -n 1 || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
GPT_STEP="tests/nn/test_ch14_gpt.py::test_gpt_forward_matches_numpy_float64
          tests/nn/test_ch14_gpt.py::test_step_reuses_one_plan_and_loss_falls"
TESTS=${TESTS:-tests/codegen/test_vector_kernels.py tests/nn/test_nn_attention.py $GPT_STEP}
PYTEST_ARGS=${PYTEST_ARGS:--n 2 --dist loadfile}
STAGES=${*:-root setup demo test}
mkdir -p "$WORK/logs"
stage() { echo; echo "=== $1 ($(date +%T))"; }
timed() { local t0=$SECONDS rc=0; "$@" || rc=$?; echo "--- took $((SECONDS - t0)) s (exit $rc): ${*:1:3}" >&2; return $rc; }

host_packages() {
  local want=(qemu-user-static debootstrap)
  [[ " $STAGES " == *" cross "* ]] && want+=(gcc-aarch64-linux-gnu)
  local missing=() p; for p in "${want[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if ((${#missing[@]})); then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; fi
  mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  # qemu-user-static's own binfmt.d entry (flag F: the kernel opens qemu now, so it runs inside the chroot too);
  # binfmt-support's update-binfmts where that is installed instead
  if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    local conf=/usr/lib/binfmt.d/qemu-aarch64.conf
    if [ -f $conf ]; then cat $conf > /proc/sys/fs/binfmt_misc/register; else update-binfmts --enable qemu-aarch64; fi
  fi
}

# ---- chroot plumbing: mounts undone on exit, whatever happens ----
MOUNTED=()
mount_root() {
  [ ${#MOUNTED[@]} -gt 0 ] && return
  mountpoint -q "$ROOT/proc" || { mount -t proc proc "$ROOT/proc"; MOUNTED+=("$ROOT/proc"); }
  mountpoint -q "$ROOT/sys" || { mount -t sysfs sysfs "$ROOT/sys"; MOUNTED+=("$ROOT/sys"); }
  mountpoint -q "$ROOT/dev" || { mount --rbind /dev "$ROOT/dev"; mount --make-rslave "$ROOT/dev"; MOUNTED+=("$ROOT/dev"); }
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  # the host's CA bundle: pip inside then trusts whatever the host trusts (a TLS-inspecting proxy's CA included)
  mkdir -p "$ROOT/etc/ssl"; cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/host-ca.crt"
}
umount_root() {
  local m; for m in "${MOUNTED[@]}"; do umount -R "$m" 2>/dev/null || umount -lR "$m"; done; MOUNTED=()
}
trap umount_root EXIT
in_root() {   # in_root 'shell command' : runs in /srv/repo inside the arm64 root
  chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive PIP_CERT=/etc/ssl/host-ca.crt SSL_CERT_FILE=/etc/ssl/host-ca.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 bash -c "cd /srv/repo 2>/dev/null; $1"
}

# ---- stage cross: tests/platforms/test_arm.py renders the kernels with NEON's tiles here and compiles each for aarch64 ----
cross() {
  stage "cross: uopc's kernels through aarch64-linux-gnu-gcc (tests/platforms/test_arm.py)"
  [ -x "$REPO/.venv/bin/python" ] || timed make -C "$REPO" setup > "$WORK/logs/x86_setup.log" 2>&1
  (cd "$REPO" && timed env OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -p no:cacheprovider -rs tests/platforms/test_arm.py)
}

# ---- stage root: debootstrap an arm64 Debian 12 and install the toolchain in it ----
make_root() {
  stage "root: arm64 bookworm in $ROOT"
  [ -x "$ROOT/bin/sh" ] || timed debootstrap --arch=arm64 --variant=minbase bookworm "$ROOT" "$MIRROR" \
    > "$WORK/logs/debootstrap.log" 2>&1
  mount_root
  in_root 'command -v gcc && command -v make && command -v git && test -f /usr/lib/python3.11/venv/__init__.py &&
           test -f /etc/OpenCL/vendors/pocl.icd' >/dev/null 2>&1 ||
    timed in_root 'apt-get update -qq && apt-get install -y --no-install-recommends python3 python3-venv gcc \
                   libc6-dev make git ca-certificates pocl-opencl-icd' > "$WORK/logs/root_apt.log" 2>&1
  in_root 'uname -m; python3 --version; gcc --version | head -1'
}

# ---- stage setup: the repository and its .venv inside the root, as a student makes it ----
setup() {
  stage "setup: $REPO -> $ROOT/srv/repo, make setup"
  mount_root
  mkdir -p "$ROOT/srv"
  [ -d "$ROOT/srv/repo/.git" ] || git clone -q "$REPO" "$ROOT/srv/repo"
  git -C "$ROOT/srv/repo" fetch -q "$REPO" HEAD && git -C "$ROOT/srv/repo" reset -q --hard FETCH_HEAD
  git -C "$ROOT/srv/repo" log --oneline -1
  timed in_root 'make setup' > "$WORK/logs/arm_setup.log" 2>&1 || { tail -20 "$WORK/logs/arm_setup.log"; exit 1; }
  tail -3 "$WORK/logs/arm_setup.log"
  in_root '.venv/bin/python -c "import platform, numpy, pyopencl as cl
print(platform.machine(), numpy.__version__, [p.name for p in cl.get_platforms()])"
           .venv/bin/python -m pip list 2>/dev/null | grep -ciE "pocl|oclgrind" |
           sed "s/^/x86-64-only device packages installed: /"' || true
}

# ---- stage demo: the book's main example, as `make demo` runs it ----
demo() {
  stage "demo: make demo"
  mount_root
  timed in_root 'make demo' 2>&1 | tail -12
}

# ---- stage test ----
run_tests() {
  stage "test: $TESTS"
  mount_root
  timed in_root "OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -p no:cacheprovider -rfEs --durations=10 \
                 $PYTEST_ARGS $TESTS" > "$WORK/logs/arm_tests.log" 2>&1 || true
  grep -E "^(FAILED|ERROR|SKIPPED)|^[0-9.]+s call|(passed|failed|error)( |,).* in " "$WORK/logs/arm_tests.log" | tail -25
  timed in_root 'DEVICE=CL .venv/bin/python examples/flash_attention.py 64 32' 2>&1 | tail -8 || true
}

host_packages
for s in $STAGES; do
  case $s in cross) cross ;; root) make_root ;; setup) setup ;; demo) demo ;; test) run_tests ;;
    *) echo "unknown stage $s (cross, root, setup, demo, test)"; exit 2 ;; esac
done
