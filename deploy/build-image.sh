#!/usr/bin/env bash
# Builds the dohfwd image from deploy/Dockerfile with podman, pulling
# nothing, and writes it as an OCI archive.
#
# The Dockerfile's build stage is FROM golang:1.26. With no registry, that
# image is made locally once (a stand-in: the host's Go toolchain, busybox
# and the host's CA bundle), and the build stage reads modules from the
# host's module cache (GOPROXY=off) and shares its build cache.
#
# Environment: VERSION, REVISION, IMAGE (default localhost/dohfwd),
# ARCHIVE (default dist/dohfwd-image.tar), PODMAN (default podman; may
# carry --root/--runroot for a private store).
set -euo pipefail

cd "$(dirname "$0")/.."
: "${CONTAINERS_CONF:=$PWD/deploy/containers.conf}"
export CONTAINERS_CONF
PODMAN=${PODMAN:-podman}
IMAGE=${IMAGE:-localhost/dohfwd}
ARCHIVE=${ARCHIVE:-dist/dohfwd-image.tar}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
REVISION=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
GO_IMAGE=golang:$(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')

if ! command -v "${PODMAN%% *}" >/dev/null; then
	echo "build-image: podman is not installed (scripts/setup.d/50-podman.sh installs it)" >&2
	exit 1
fi

# standin makes the golang builder image from the host's toolchain, laid
# out like the official one (GOPATH /go, Go in /usr/local/go).
standin() {
	local goroot stage
	goroot=$(go env GOROOT)
	stage=$(mktemp -d)
	trap 'rm -rf "$stage"' RETURN
	mkdir -p "$stage/bin" "$stage/etc/ssl/certs" "$stage/tmp" "$stage/go/pkg/mod" "$stage/root/.cache"
	cp "$(command -v busybox)" "$stage/bin/busybox"
	for applet in $(busybox --list); do
		[ "$applet" = busybox ] || ln -s busybox "$stage/bin/$applet"
	done
	cp /etc/ssl/certs/ca-certificates.crt "$stage/etc/ssl/certs/"
	echo 'root:x:0:0:root:/root:/bin/sh' >"$stage/etc/passwd"
	echo 'root:x:0:' >"$stage/etc/group"
	chmod 1777 "$stage/tmp"
	echo "build-image: making local stand-in $GO_IMAGE from $goroot and busybox"
	tar -C "$stage" -c -f "$stage.tar" --transform 's|^\./||' .
	tar -C / -r -f "$stage.tar" --exclude="${goroot#/}/test" \
		--transform "s|^${goroot#/}|usr/local/go|" "${goroot#/}"
	$PODMAN import \
		--change 'ENV PATH=/go/bin:/usr/local/go/bin:/bin' \
		--change 'ENV GOPATH=/go' \
		--change 'ENV HOME=/root' \
		--change 'ENV GOTOOLCHAIN=local' \
		--change 'WORKDIR /go' \
		"$stage.tar" "docker.io/library/$GO_IMAGE" >/dev/null
	rm -f "$stage.tar"
}

if ! $PODMAN image exists "docker.io/library/$GO_IMAGE"; then
	command -v busybox >/dev/null || { echo "build-image: busybox-static is needed for the stand-in builder" >&2; exit 1; }
	standin
fi

# Every module the build needs must be in the host cache before the build
# stage runs with GOPROXY=off.
go mod download
modcache=$(go env GOMODCACHE)
gocache=$(go env GOCACHE)

previous=$($PODMAN image inspect --format '{{.Id}}' "$IMAGE:latest" 2>/dev/null || true)
$PODMAN build --pull=never --layers=false --format docker \
	-f deploy/Dockerfile --ignorefile deploy/Dockerfile.dockerignore \
	--volume "$modcache:/go/pkg/mod:ro" \
	--volume "$gocache:/root/.cache/go-build" \
	--build-arg "GO_IMAGE=$GO_IMAGE" \
	--build-arg GOPROXY=off --build-arg GOFLAGS=-mod=readonly \
	--build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" \
	--build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
	-t "$IMAGE:$VERSION" -t "$IMAGE:latest" .

# The image's contract: a shell-free health check and a numeric non-root user.
health=$($PODMAN image inspect --format '{{json .HealthCheck.Test}}' "$IMAGE:latest")
user=$($PODMAN image inspect --format '{{.Config.User}}' "$IMAGE:latest")
case $health in *'"CMD"'*dohfwd*healthcheck*) ;; *) echo "build-image: no exec-form HEALTHCHECK: $health" >&2; exit 1 ;; esac
case $user in 0 | 0:* | root* | "") echo "build-image: image runs as root ($user)" >&2; exit 1 ;; esac

# The image this build replaced would stay behind untagged; remove it.
current=$($PODMAN image inspect --format '{{.Id}}' "$IMAGE:latest")
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
	$PODMAN rmi "$previous" >/dev/null 2>&1 || true
fi

mkdir -p "$(dirname "$ARCHIVE")"
rm -f "$ARCHIVE"
$PODMAN save --format oci-archive -o "$ARCHIVE" "$IMAGE:latest"
size=$($PODMAN image inspect --format '{{.Size}}' "$IMAGE:latest")
echo "build-image: $IMAGE:$VERSION user=$user size=$((size / 1024 / 1024)) MB ($size bytes), archive $ARCHIVE $(($(stat -c %s "$ARCHIVE") / 1024 / 1024)) MB"
