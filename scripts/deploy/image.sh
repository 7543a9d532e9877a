#!/usr/bin/env bash
# Builds the FROM-scratch image of QMQ-Go (scripts/deploy/Dockerfile) with
# podman or docker, whichever runs here, else buildah (which needs no
# daemon: the Dockerfile only copies files). ENGINE=docker chooses;
# ENGINE_FLAGS are the engine's global flags (buildah --root DIR ...).
#
#   scripts/deploy/image.sh              image qmq-go:<version> and qmq-go:latest
#   VERSION=v1.2.0 scripts/deploy/image.sh
#
# The binaries come from scripts/build.sh (static, version stamped) plus
# etcd's own server (scripts/deploy/etcd) for the compose file's external
# etcd cluster. Prints the image name on its last line.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"

pick_engine() {
  for e in podman docker; do
    command -v "$e" >/dev/null && "$e" info >/dev/null 2>&1 && { echo "$e"; return; }
  done
  command -v buildah >/dev/null && { echo buildah; return; }
  echo "image.sh: no container engine runs here (podman, docker or buildah)" >&2
  exit 1
}
ENGINE=${ENGINE:-$(pick_engine)}
[ -n "$ENGINE" ] || exit 1
read -r -a engine_flags <<<"${ENGINE_FLAGS:-}"
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
IMAGE=${IMAGE:-qmq-go}

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
OUT="$ctx/bin" VERSION="$VERSION" COMMIT="$COMMIT" scripts/build.sh
CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$ctx/bin/etcd" ./scripts/deploy/etcd
mkdir -p "$ctx/rootfs/var/lib/qmq" "$ctx/rootfs/etc/qmq"
chmod 0700 "$ctx/rootfs/var/lib/qmq"
cp scripts/deploy/Dockerfile "$ctx/"
"$ENGINE" "${engine_flags[@]}" build --build-arg "VERSION=$VERSION" -t "$IMAGE:$VERSION" -t "$IMAGE:latest" "$ctx" >&2
echo "$IMAGE:$VERSION"
