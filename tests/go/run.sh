#!/usr/bin/env bash
# The Go client test (client_test.go) against a real server, offline: protoc-gen-go
# (Debian's protoc-gen-go-1-3, with its grpc plugin) makes the stubs from proto/, and
# go test builds them against Debian's golang-google-grpc-dev in GOPATH mode.
#   tests/go/run.sh build/server/gpucompute-server
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
server=$(realpath "${1:?usage: tests/go/run.sh SERVER_BINARY}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/src/clienttest"
protoc -I "$repo/proto" \
  --go_out=plugins=grpc,Mgpucompute/v1/gpucompute.proto=gpucompute/v1:"$work/src" \
  gpucompute/v1/gpucompute.proto
cp "$here"/*_test.go "$work/src/clienttest/"
cd "$work/src/clienttest"
GPUCOMPUTE_SERVER=$server GOPATH="$work:/usr/share/gocode" GO111MODULE=off GOFLAGS= \
  GOCACHE=${GOCACHE:-${XDG_CACHE_HOME:-${HOME:-$work}/.cache}/go-build} \
  go test -count=1 -v .
