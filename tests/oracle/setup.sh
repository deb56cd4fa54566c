#!/usr/bin/env bash
# Sets up the real-delegate oracle for the tests (`make oracle`, run by `make test`).
# Adapted from ../shared/oracle/setup.sh (the project's first oracle); this copy is ours.
#
#   tests/oracle/setup.sh VENV            Google's GPU delegate (OpenGL ES backend) on Mesa llvmpipe
#   tests/oracle/setup.sh VENV --webgpu   also LiteRT's GPU accelerator (WebGPU/Dawn) on Mesa lavapipe
#
# The apt packages (EGL/GLES and Mesa's software GL, binutils for `nm`) are installed only when
# they are missing and this user is root with apt-get; the pinned wheels go into VENV, a venv of
# its own (mediapipe and ai-edge-litert pin numpy/protobuf versions that are not ours).
# A stamp file makes a second run instant. Exit status 0 when the oracle is ready, 3 when it
# cannot be set up here (the oracle tests then skip and say why).
set -uo pipefail
VENV=${1:?usage: setup.sh VENV [--webgpu]}
WEBGPU=${2:-}
PY=${ORACLE_PYTHON:-$(command -v python3.11 || command -v python3)}
PINS="mediapipe==1.2.2 ai-edge-litert==2.3.0 numpy"
APT="libegl1 libegl-mesa0 libgles2 libgl1-mesa-dri libgbm1 binutils"
STAMP="$VENV/.oracle-ready"            # the GL delegate's oracle is ready (tests/oracle/__init__.py)
WEBGPU_STAMP="$VENV/.oracle-webgpu-ready"  # and LiteRT's WebGPU accelerator's
WANT="$PINS|$APT"

note() { echo "note: $*; the oracle tests will skip" >&2; exit 3; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && { [ "$WEBGPU" != "--webgpu" ] || [ -f "$WEBGPU_STAMP" ]; }; then
  exit 0
fi

missing() {  # the packages of "$@" that dpkg does not list as installed
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1; }

need=$(command -v dpkg-query >/dev/null 2>&1 && missing $APT)
if [ -n "$need" ]; then
  can_apt || note "the oracle needs the apt packages $need and this user cannot install them"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null \
    || note "apt-get could not install $need"
fi

if [ "$WEBGPU" = "--webgpu" ]; then
  # Dawn needs a newer lavapipe than bookworm's Mesa 22.3: Mesa 25 from bookworm-backports,
  # from the same mirror as the machine's own Debian sources.
  if [ -z "$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | grep -E '^(2[4-9]|[3-9][0-9])\.')" ]; then
    can_apt || note "WebGPU needs Mesa >= 24 (mesa-vulkan-drivers from bookworm-backports) and this user cannot install it"
    src=/etc/apt/sources.list.d/debian.sources
    if [ -f "$src" ] && [ ! -f /etc/apt/sources.list.d/backports.sources ]; then
      awk '/^Suites:/ && !done {print "Suites: bookworm-backports"; done=1; next} {print} /^$/ {exit}' "$src" \
        > /etc/apt/sources.list.d/backports.sources
      apt-get update -qq
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -t bookworm-backports mesa-vulkan-drivers libvulkan1 >/dev/null \
      || note "apt-get could not install Mesa from bookworm-backports"
  fi
fi

[ -n "$PY" ] || note "no python3 to make the oracle venv with"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" || note "could not create the venv $VENV"
fi
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "setting up the GPU-delegate oracle in $VENV ($PINS)" >&2
  # (pip's warnings about this machine's unused find-links folders are not ours to show)
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check $PINS 2> >(grep -v "is ignored: it is neither" >&2) \
    || note "pip could not install $PINS into $VENV"
  "$VENV/bin/python" -c "import mediapipe, ai_edge_litert, numpy" || note "the oracle venv $VENV does not import"
  echo "$WANT" > "$STAMP"
fi
[ "$WEBGPU" = "--webgpu" ] && touch "$WEBGPU_STAMP"
echo "oracle ready: $VENV" >&2
