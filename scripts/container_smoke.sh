#!/usr/bin/env bash
# CI's check of the workshop image (.ci/run calls it; exits non-zero when the recipe breaks):
# build the CPU variant of the Containerfile from a Debian base made with mmdebstrap (no
# registry), then inside it, with --network none:
#   1. python -m labkit doctor
#   2. one profiled run of the application under nsys (a 2 s clip made in the container),
#      whose report must hold the application's NVTX stage ranges
#   3. make test's fastest slice (SMOKE_TESTS below: the doctor, nsys profiling, the application,
#      the lab's commands, the import rules)
#   4. the image's own command: JupyterLab answers with the token from the environment, refuses
#      without it, and no process shows the token on its command line
#   5. the pieces of the Nsight GUI in the browser are there (nsys-ui, Xvfb, x11vnc, noVNC) and
#      nsys-ui's libraries all resolve
#   6. nothing of this machine is baked in: none of its extra CA certificates, no token
# and print what each part cost. Cached on one machine between runs: the base tarball (a week)
# and podman's layers (after a source change only the last layers are redone, about 10 s; after
# a change to pyproject.toml the dependencies' layer too). pip's downloads go to a build cache
# mount, which holds nothing here: this machine's proxy marks every response uncacheable.
#
#   bash scripts/container_smoke.sh          # as root (podman); IMAGE=, LABKIT_CONTAINER_CACHE= optional
#   bash scripts/container_smoke.sh build    # the base and the image only (.ci/run builds beside make test)
#   bash scripts/container_smoke.sh check    # 1-6 on the image built before
set -euo pipefail
part=${1:-all}
case "$part" in all|build|check) ;; *) echo "container-smoke: $part: use build, check or nothing (both)" >&2; exit 2;; esac
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export VARIANT=cpu IMAGE=${IMAGE:-labkit:cpu}
say() { echo "container-smoke: $*"; }
start=$(date +%s)
SMOKE_TESTS="tests/test_doctor.py tests/test_nsys_profile.py tests/test_app.py tests/test_lab_commands.py \
tests/test_architecture.py tests/test_plain_nvtx.py"

for tool in podman mmdebstrap; do
  command -v "$tool" >/dev/null || { say "no $tool: apt-get install -y podman buildah runc mmdebstrap (.ci/run does)"; exit 1; }
done
export CONTAINER_ENGINE=podman
eval "$(bash scripts/container.sh env)"  # podman's settings for this machine (runc, ulimits)

t_base=0 t_build=0
if [ "$part" != check ]; then
t=$(date +%s)
bash scripts/container.sh base
t_base=$(( $(date +%s) - t ))

t=$(date +%s)
build_log=$(mktemp /tmp/labkit-container-build.XXXXXX)
say "building $IMAGE (log: $build_log)"
bash scripts/container.sh build > "$build_log" 2>&1 || { tail -n 80 "$build_log"; say "the build failed (log: $build_log)"; exit 1; }
t_build=$(( $(date +%s) - t ))
# Earlier builds' images, now untagged, go (the tagged image's own layers, the cache, stay):
# without this every CI run would leave its superseded layers on the disk.
podman image prune -f >/dev/null
grep -E "^container: |^torch |^nsys " "$build_log" || true
rm -f "$build_log"
fi
size=$(podman image inspect "$IMAGE" --format '{{.Size}}') \
  || { say "no image $IMAGE: build it first (bash scripts/container_smoke.sh build)"; exit 1; }
if [ "$part" = build ]; then
  say "image $IMAGE: $(( size / 1000000 )) MB; cost: base ${t_base} s, build ${t_build} s"
  exit 0
fi

t=$(date +%s)
say "1-3. doctor, a profiled run, make test's fastest slice (--network none)"
podman run --rm --network none -e LABKIT_REQUIRE_NSYS=1 -e SMOKE_TESTS="$SMOKE_TESTS" "$IMAGE" \
  bash -euo pipefail -c '
    python -m labkit doctor
    mkdir -p /tmp/smoke
    python source_code/make_video.py --out /tmp/smoke/clip.mp4 --seconds 2 --width 320 --height 192 --seed 7
    python -m labkit profile --name smoke --outdir /tmp/smoke/profiles -- \
      python source_code/detect_video.py --input /tmp/smoke/clip.mp4 --frames 24 --warmup 4 \
        --input-hw 192x320 --device cpu --results /tmp/smoke/smoke.json
    ranges=$(python -m labkit summary /tmp/smoke/profiles/smoke.sqlite --what nvtx --csv)
    for stage in decode preprocess infer postprocess track; do
      grep -q "^$stage," <<<"$ranges" || { echo "container-smoke: no NVTX range $stage in the profile" >&2; exit 1; }
    done
    make test PYTEST_ARGS="-m \"not slow\" -p no:cacheprovider $SMOKE_TESTS"'
t_inside=$(( $(date +%s) - t ))

t=$(date +%s)
say "4. the image's command: JupyterLab with the token from the environment"
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
cid=$(JUPYTER_TOKEN=$token podman run -d --network none -e JUPYTER_TOKEN -e LABKIT_MODE=small "$IMAGE")
trap 'podman rm -f "$cid" >/dev/null 2>&1 || true' EXIT
T=$token podman exec -e T "$cid" python -c '
import os, time, urllib.error, urllib.request
api, token = "http://127.0.0.1:8888/api/status", os.environ["T"]
for _ in range(120):
    try:
        urllib.request.urlopen(f"{api}?token={token}", timeout=5).read()
        break
    except OSError:
        time.sleep(0.5)
else:
    raise SystemExit("container-smoke: JupyterLab did not answer within 60 s")
try:
    urllib.request.urlopen(api.replace("status", "sessions"), timeout=5)
    raise SystemExit("container-smoke: JupyterLab answered without the token")
except urllib.error.HTTPError as e:
    assert e.code == 403, e
shown = [open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ") for p in os.listdir("/proc") if p.isdigit()]
assert not any(token.encode() in c for c in shown), "container-smoke: the token is on a command line"
print("JupyterLab answered with the token, refused without it; no command line holds it")'
log=$(podman logs "$cid" 2>&1)
grep -qxF "JupyterLab (small mode) at: http://127.0.0.1:8888/lab?token=$token" <<<"$log" \
  || { echo "$log"; say "no line with the URL to open"; exit 1; }
podman stop -t 20 "$cid" >/dev/null
t_jupyter=$(( $(date +%s) - t ))

t=$(date +%s)
say "5. the Nsight GUI in the browser: its pieces; 6. nothing of this machine baked in"
# a line from the body of each extra CA certificate this machine trusts (a proxy's, say)
extra=$(for f in /usr/local/share/ca-certificates/*.crt; do [ -f "$f" ] && sed -n 3p "$f"; done; true)
podman run --rm --network none -e EXTRA="$extra" "$IMAGE" bash -euo pipefail -c '
  for exe in nsys nsys-ui Xvfb x11vnc websockify; do command -v "$exe" >/dev/null || { echo "container-smoke: no $exe" >&2; exit 1; }; done
  test -f /usr/share/novnc/vnc.html || { echo "container-smoke: no noVNC page" >&2; exit 1; }
  ui=$(readlink -f "$(command -v nsys-ui)"); ui=${ui%/*}/nsys-ui.bin; [ -x "$ui" ] || ui=$(command -v nsys-ui)
  missing=$(LD_LIBRARY_PATH=${ui%/*}:${LD_LIBRARY_PATH:-} ldd "$ui" | grep "not found" || true)
  [ -z "$missing" ] || { echo "container-smoke: nsys-ui lacks libraries: $missing" >&2; exit 1; }
  bundles=$(find /etc/ssl /usr/local/share/ca-certificates /opt/venv -name "*.pem" -o -name "*.crt" 2>/dev/null)
  while read -r line; do
    [ -z "$line" ] || ! grep -qF -- "$line" $bundles \
      || { echo "container-smoke: a CA certificate of the build machine is in the image" >&2; exit 1; }
  done <<<"$EXTRA"
  test -z "$(ls -A /run/secrets 2>/dev/null)" || { echo "container-smoke: /run/secrets is not empty" >&2; exit 1; }
  echo "GUI pieces present; no build-machine certificate or secret in the image"'
if podman image inspect "$IMAGE" --format '{{json .Config.Env}}' | grep -q JUPYTER_TOKEN; then
  say "the image sets JUPYTER_TOKEN: a token must come from the run, not the image"; exit 1
fi
t_checks=$(( $(date +%s) - t ))

total=$(( $(date +%s) - start ))
say "image $IMAGE: $(( size / 1000000 )) MB"
built="base ${t_base} s, build ${t_build} s"; [ "$part" != check ] || built="base and build: done before"
say "cost: $built, doctor + profiled run + tests ${t_inside} s, JupyterLab ${t_jupyter} s, GUI and secrets checks ${t_checks} s; total ${total} s"
