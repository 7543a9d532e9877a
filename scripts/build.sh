#!/usr/bin/env bash
# Static, reproducible builds of every binary with the version stamped in
# (pkg/buildinfo; each binary's --version prints it).
#
#   scripts/build.sh                 all binaries into bin/ for this machine
#   OUT=dist GOOS=linux GOARCH=arm64 scripts/build.sh
#   VERSION=v1.2.0 scripts/build.sh  (default: git describe, else "dev")
#
# CGO_ENABLED=0 (no libc: the binaries run FROM scratch and on any Linux),
# -trimpath (no build paths in the binary), -ldflags "-s -w -X ...":
# stripped, Version and Commit stamped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

OUT=${OUT:-bin}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
BINARIES=(
  ./metaserver/cmd/qmq-metaserver
  ./metaserver/cmd/qmqctl
  ./realtime/cmd/qmq-realtime
  ./delay/cmd/qmq-delay
  ./consumer/cmd/qmq-gateway
)

pkg=github.com/qmq-go/qmq/pkg/buildinfo
mkdir -p "$OUT"
CGO_ENABLED=0 go build -trimpath -buildvcs=false \
  -ldflags "-s -w -X $pkg.Version=$VERSION -X $pkg.Commit=$COMMIT" \
  -o "$OUT/" "${BINARIES[@]}"
echo "built ${#BINARIES[@]} binaries into $OUT/ (version $VERSION, commit $COMMIT)"
