#!/usr/bin/env bash
# Build and run the workshop image (Containerfile); `make container` and `make container-run` call this.
#
#   scripts/container.sh base    # CPU only: a Debian 12 base image made with mmdebstrap (no registry needed)
#   scripts/container.sh build   # the image: VARIANT=gpu (NVIDIA's PyTorch base) or cpu (Debian)
#   scripts/container.sh run     # JupyterLab in it: MODE, PORT, IP, JUPYTER_TOKEN as `make jupyter`
#   scripts/container.sh env     # prints the podman settings for this machine: eval "$(scripts/container.sh env)"
#
# Variables (all optional):
#   CONTAINER_ENGINE  podman or docker (default: podman where installed, else docker)
#   VARIANT           gpu or cpu (default: gpu where `nvidia-smi -L` lists a GPU, else cpu)
#   IMAGE             image name (default: labkit:$VARIANT)
#   BASE              base image (default: the Containerfile's for gpu; for cpu the mmdebstrap base
#                     where podman and mmdebstrap are installed, else docker.io/library/debian:bookworm)
#   TORCH_WHEELS      a folder holding torch's CPU wheel, mounted read-only at build time (podman);
#                     default: the first folder of pip's find-links that holds one, else PyTorch's CPU index
#   LABKIT_CONTAINER_CACHE  where the base tarball and podman's settings live
#                     (default /var/cache/labkit-container as root, else ~/.cache/labkit-container)
#   run: MODE (small|full), PORT (8888), IP (127.0.0.1), JUPYTER_TOKEN, GUI_PORT (6080),
#        REPORTS (host folder mounted at /reports, default ./reports), GPU_METRICS=1 (adds
#        --cap-add SYS_ADMIN, which nsys --gpu-metrics-devices needs), RUN_ARGS (more engine options)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { echo "container: $*" >&2; }
die() { say "$*"; exit 1; }

ENGINE=${CONTAINER_ENGINE:-$(command -v podman >/dev/null 2>&1 && echo podman || echo docker)}
command -v "$ENGINE" >/dev/null 2>&1 || die "no $ENGINE: install podman (apt-get install podman) or Docker, or set CONTAINER_ENGINE"
if [ -z "${VARIANT:-}" ] || [ "$VARIANT" = auto ]; then
  VARIANT=$(nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
fi
case "$VARIANT" in gpu|cpu) ;; *) die "VARIANT=$VARIANT: use gpu or cpu";; esac
IMAGE=${IMAGE:-labkit:$VARIANT}
CACHE=${LABKIT_CONTAINER_CACHE:-$([ "$(id -u)" -eq 0 ] && echo /var/cache/labkit-container || echo "$HOME/.cache/labkit-container")}
DEBIAN_BASE=localhost/labkit-debian:bookworm
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

# Podman on a machine whose cgroups are v1 or hybrid (crun refuses them) or whose hard limits
# are below podman's default ulimits: a containers.conf with runc and the machine's own limits
# (processes: at most kernel.pid_max, above which runc's setrlimit was refused on the CI VM).
# An existing CONTAINERS_CONF is used as it is.
podman_settings() {
  [ "$ENGINE" = podman ] && [ -z "${CONTAINERS_CONF:-}" ] || return 0
  local conf="$CACHE/containers.conf" nofile nproc pid_max ulimits runtime=""
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu); pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
  [ "$nofile" != unlimited ] || nofile=1048576
  if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then nproc=$pid_max; fi
  ulimits="\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\""
  if [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ] && command -v runc >/dev/null 2>&1; then
    runtime=$'\n[engine]\nruntime = "runc"'
  fi
  mkdir -p "$CACHE"
  printf '[containers]\ndefault_ulimits = [%s]%s\n' "$ulimits" "$runtime" > "$conf.tmp" && mv "$conf.tmp" "$conf"
  export CONTAINERS_CONF="$conf"
}

# The CPU variant's base: Debian 12 minbase from Debian's mirror, made with mmdebstrap, imported
# once and kept (a new import would change its id, and every layer above would miss the cache);
# the tarball is remade, and imported again, when older than a week, so security updates reach it.
cmd_base() {
  [ "$ENGINE" = podman ] || die "the local base needs podman (docker: BASE=docker.io/library/debian:bookworm)"
  local tar="$CACHE/debian-bookworm.tar" t mirror=${DEBIAN_MIRROR:-http://deb.debian.org}
  if [ -n "$(find "$tar" -mtime -7 2>/dev/null)" ] && "$ENGINE" image exists "$DEBIAN_BASE"; then
    say "base $DEBIAN_BASE present (from $tar)"; return 0
  fi
  if [ -z "$(find "$tar" -mtime -7 2>/dev/null)" ]; then
    command -v mmdebstrap >/dev/null 2>&1 || die "no mmdebstrap: apt-get install mmdebstrap (or set BASE=docker.io/library/debian:bookworm)"
    mkdir -p "$CACHE"
    t=$(date +%s)
    mmdebstrap --quiet --format=tar --variant=minbase bookworm "$tar.tmp" \
      "deb $mirror/debian bookworm main" "deb $mirror/debian bookworm-updates main" \
      "deb $mirror/debian-security bookworm-security main"
    mv "$tar.tmp" "$tar"
    say "made $tar with mmdebstrap in $(( $(date +%s) - t )) s ($(du -h "$tar" | cut -f1))"
  fi
  "$ENGINE" import --change 'CMD ["/bin/bash"]' "$tar" "$DEBIAN_BASE" >/dev/null
  say "imported $DEBIAN_BASE from $tar"
}

# torch's CPU wheel on this machine (cp311: Debian 12's Python), in a folder of pip's find-links.
torch_wheels() {
  local d dirs=${TORCH_WHEELS:-} version=${TORCH_SPEC#torch==}
  if [ -z "$dirs" ]; then
    dirs="${PIP_FIND_LINKS:-} $(pip config get global.find-links 2>/dev/null || true)"
  fi
  for d in $dirs; do
    d=${d#file://}
    if compgen -G "$d/torch-$version*cpu*-cp311-*.whl" >/dev/null; then echo "$d"; return 0; fi
  done
  return 0
}

cmd_build() {
  podman_settings
  local args=(build -f Containerfile -t "$IMAGE" --build-arg "VARIANT=$VARIANT")
  local base=${BASE:-}
  if [ "$VARIANT" = cpu ]; then
    if [ -z "$base" ]; then
      if [ "$ENGINE" = podman ] && command -v mmdebstrap >/dev/null 2>&1; then cmd_base; base=$DEBIAN_BASE
      else base=docker.io/library/debian:bookworm; fi
    fi
    args+=(--build-arg "TORCH_SPEC=$TORCH_SPEC")
    local wheels; wheels=$(torch_wheels)
    if [ -n "$wheels" ] && [ "$ENGINE" = podman ]; then
      args+=(-v "$wheels:/wheels:ro"); say "torch from $wheels (read-only at build time)"
    fi
  fi
  [ -z "$base" ] || args+=(--build-arg "BASE=$base")
  # The machine's CA bundle as a build secret: a TLS-inspecting proxy's CA reaches pip and apt
  # during the build only; no layer holds it.
  [ -f /etc/ssl/certs/ca-certificates.crt ] && args+=(--secret id=ca_bundle,src=/etc/ssl/certs/ca-certificates.crt)
  local rev; rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  args+=(--build-arg "REVISION=$rev")
  [ "$ENGINE" = docker ] && export DOCKER_BUILDKIT=1
  say "$ENGINE ${args[*]} ${BUILD_ARGS:-} ."
  # shellcheck disable=SC2086  # BUILD_ARGS: more options, split on spaces on purpose
  "$ENGINE" "${args[@]}" ${BUILD_ARGS:-} .
}

cmd_run() {
  podman_settings
  local mode=${MODE:-full} port=${PORT:-8888} ip=${IP:-127.0.0.1} gui=${GUI_PORT:-6080}
  local reports=${REPORTS:-$PWD/reports} host
  mkdir -p "$reports"
  host=$([ "$ip" = 0.0.0.0 ] && hostname || echo "$ip")
  local args=(run --rm --name "labkit-$port" --hostname labkit
    -p "$ip:$port:$port" -p "$ip:$gui:6080"
    -v "$(cd "$reports" && pwd -P):/reports" -v labkit-cache:/root/.cache
    -e "LABKIT_MODE=$mode" -e "PORT=$port" -e "URL_HOST=$host"
    --shm-size 2g)
  [ -t 0 ] && [ -t 1 ] && args+=(-it)
  # The token goes by name: the engine copies it from this environment (never on a command line).
  [ -n "${JUPYTER_TOKEN:-}" ] && { export JUPYTER_TOKEN; args+=(-e JUPYTER_TOKEN); }
  if [ "$VARIANT" = gpu ]; then
    if [ "$ENGINE" = docker ]; then args+=(--gpus all); else args+=(--device nvidia.com/gpu=all); fi
  fi
  [ -n "${GPU_METRICS:-}" ] && args+=(--cap-add SYS_ADMIN)
  [ "$ip" = 0.0.0.0 ] && say "listening on every interface: the token is all that guards it; keep the ports behind a firewall"
  say "JupyterLab on port $port, the Nsight GUI (make nsys-ui inside) on $gui; runs kept in $reports"
  # shellcheck disable=SC2086
  exec "$ENGINE" "${args[@]}" ${RUN_ARGS:-} "$IMAGE"
}

case "${1:-}" in
  base) podman_settings; cmd_base;;
  build) cmd_build;;
  run) cmd_run;;
  env) podman_settings; [ -z "${CONTAINERS_CONF:-}" ] || echo "export CONTAINERS_CONF=$CONTAINERS_CONF";;
  *) die "usage: scripts/container.sh base|build|run|env (see its first lines)";;
esac
