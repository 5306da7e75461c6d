#!/usr/bin/env bash
# Builds the images and runs the compose federation end to end, on a machine that can run
# Docker but reaches no image registry: the base images are made locally, the runtime one by
# debootstrap from Debian's packages and the build one from it plus gcc and the host's Rust
# toolchain (`rustc --print sysroot`) and the host's CA certificates (crates are still fetched from crates.io). With a registry, give no
# LOCAL_BASE and the Dockerfile's defaults are used. Usage, from anywhere:
#
#   docs/containers/try.sh [OUT]      # OUT (default out/compose) receives the draws
#
# SKIP_BUILD=1 uses the images already built.
# Needs docker (and `docker compose` or docker-compose); LOCAL_BASE=1 also debootstrap.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/out/compose}"
images="${IMAGES_DIR:-$root/target/images}"
compose() {
    if docker compose version > /dev/null 2>&1; then
        docker compose -f "$here/compose.yaml" "$@"
    else
        docker-compose -f "$here/compose.yaml" "$@"
    fi
}

args=(--build-arg "REVISION=$(git -C "$root" rev-parse --short=12 HEAD)")
if [ -n "${LOCAL_BASE:-}" ]; then
    if ! docker image inspect fedmcmc-local/debian:bookworm > /dev/null 2>&1; then
        mkdir -p "$images"
        debootstrap --variant=minbase bookworm "$images/bookworm" http://deb.debian.org/debian
        tar -C "$images/bookworm" -c . | docker import - fedmcmc-local/debian:bookworm
    fi
    if ! docker image inspect fedmcmc-local/rust > /dev/null 2>&1; then
        rm -rf "$images/builder"
        cp -a "$images/bookworm" "$images/builder"
        cp /etc/resolv.conf "$images/builder/etc/resolv.conf"
        chroot "$images/builder" /bin/sh -c \
            "apt-get update -q && apt-get install -y -q --no-install-recommends gcc libc6-dev ca-certificates"
        cp /etc/ssl/certs/ca-certificates.crt "$images/builder/etc/ssl/certs/ca-certificates.crt"
        cp -a "$(rustc --print sysroot)" "$images/builder/usr/local/rust"
        tar -C "$images/builder" -c . | docker import \
            --change 'ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            - fedmcmc-local/rust
    fi
    args+=(--build-arg RUST_IMAGE=fedmcmc-local/rust --build-arg RUNTIME_IMAGE=fedmcmc-local/debian:bookworm)
fi
if [ -z "${SKIP_BUILD:-}" ]; then
    for target in party coordinator; do
        docker build -f "$here/Dockerfile" "${args[@]}" --target "$target" -t "fedmcmc/$target" "$root"
    done
fi

# The one-shot `setup` exits before the others start, so the federation is started in the
# background and the coordinator's own exit is waited for.
compose down -v --remove-orphans > /dev/null 2>&1 || true
trap 'compose down -v --remove-orphans > /dev/null 2>&1 || true' EXIT
compose up -d
container="$(compose ps -q coordinator)"
status="$(docker wait "$container")"
compose logs --no-color
if [ "$status" != 0 ]; then
    echo "the coordinator exited with $status" >&2
    exit 1
fi
rm -rf "$out"
mkdir -p "$(dirname "$out")"
docker cp "$container:/fed/draws" "$out"
echo "the coordinator's output: $out"
