#!/usr/bin/env bash
# Build the Dockerfile with buildah where no container registry is reachable (CI), then run the
# image: `prober --version` and a short emulator run. Needs root, buildah and mmdebstrap
# (scripts/install-system-deps.sh), the Debian mirror and PyPI.
#
#   1. base:   mmdebstrap makes a Debian bookworm root file system with python3 and its venv module,
#              cached in $PROBER_CACHE_DIR/image/ under a key of its inputs (the command line and
#              the date of the suite's Release file), then buildah turns it into a local image;
#   2. build:  `buildah bud` builds the Dockerfile with BASE set to that image;
#   3. check:  a container of the new image runs `prober --version`, `prober init`, a short latency
#              run against the bundled emulator and `prober report`.
#
# buildah's default OCI runtime fails on these machines ("did not get container create message
# from subprocess"), so every RUN and every check uses chroot isolation, on the vfs storage driver.
# Everything the script makes (containers, both images) is removed on exit unless --keep is given
# (then the image stays as $PROBER_IMAGE). PROBER_BUILDAH_ROOT, when set, is a storage root of its
# own (the test's throwaway one). The last line sums up the steps' wall times:
#   build-image: rootfs=cached|built rootfs_s=N import_s=N build_s=N check_s=N cleanup_s=N total_s=N
set -euo pipefail
cd "$(dirname "$0")/.."

keep=false
case "${1:-}" in
    "") ;;
    --keep) keep=true ;;
    *) echo "usage: scripts/build-image.sh [--keep]" >&2; exit 2 ;;
esac
for tool in buildah mmdebstrap; do
    command -v "$tool" > /dev/null || { echo "build-image: $tool is missing: run scripts/install-system-deps.sh" >&2; exit 2; }
done

export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
image="${PROBER_IMAGE:-localhost/prober:ci}"
cache="${PROBER_CACHE_DIR:-$HOME/.cache/prober}/image"
buildah_args=()
if [ -n "${PROBER_BUILDAH_ROOT:-}" ]; then
    buildah_args=(--root "$PROBER_BUILDAH_ROOT/storage" --runroot "$PROBER_BUILDAH_ROOT/run")
fi
bh() { buildah "${buildah_args[@]}" "$@"; }

made_containers=()
made_images=()
cleanup() {
    for container in "${made_containers[@]}"; do bh rm "$container" > /dev/null 2>&1 || true; done
    for made in "${made_images[@]}"; do bh rmi "$made" > /dev/null 2>&1 || true; done
}
trap cleanup EXIT

started=$SECONDS

# --- 1. the base -------------------------------------------------------------------------------
suite=bookworm
mirror=http://deb.debian.org/debian
debootstrap_args=(--variant=minbase --include=python3,python3-venv "$suite" - "$mirror")
# The key: what mmdebstrap is asked for and the state of the archive it reads. The suite's
# Release date changes with each point release, so a cached base is refreshed when Debian's is.
release_date=$(curl -fsS --max-time 60 "$mirror/dists/$suite/InRelease" | sed -n 's/^Date: //p')
[ -n "$release_date" ] || { echo "build-image: cannot read $mirror/dists/$suite/InRelease" >&2; exit 3; }
key=$(printf '%s\n' "${debootstrap_args[*]}" "$(dpkg --print-architecture)" "$release_date" | sha256sum | cut -c1-16)
rootfs="$cache/rootfs-$key.tar"
if [ -s "$rootfs" ]; then
    rootfs_state=cached
else
    rootfs_state=built
    mkdir -p "$cache"
    partial=$(mktemp "$cache/rootfs-partial.XXXXXX")
    echo "build-image: mmdebstrap ${debootstrap_args[*]} ($suite of $release_date)" >&2
    mmdebstrap --quiet "${debootstrap_args[@]}" > "$partial" || { rm -f "$partial"; exit 3; }
    # One base is kept: an older key's tarball is 200+ MB nobody reads again.
    find "$cache" -maxdepth 1 -name 'rootfs-*.tar' ! -name "rootfs-$key.tar" -delete
    mv "$partial" "$rootfs"
fi
rootfs_done=$SECONDS

base="localhost/prober-base:$key"
container=$(bh from scratch)
made_containers+=("$container")
bh add --quiet "$container" "$rootfs" /
bh commit --quiet "$container" "$base" > /dev/null
made_images+=("$base")
import_done=$SECONDS

# --- 2. the image ------------------------------------------------------------------------------
build_args=(--build-arg "BASE=$base")
# A TLS-intercepting proxy's CA bundle (pip's PIP_CERT here) is lent to the build, never copied in.
if [ -n "${PIP_CERT:-}" ] && [ -f "$PIP_CERT" ]; then
    build_args+=(--volume "$PIP_CERT:/run/build-ca.crt:ro" --build-arg PIP_CERT=/run/build-ca.crt)
fi
made_images+=("$image")
bh bud --quiet --isolation chroot "${build_args[@]}" --tag "$image" . > /dev/null
build_done=$SECONDS

# --- 3. the checks -----------------------------------------------------------------------------
container=$(bh from "$image")
made_containers+=("$container")
in_image() { bh run --isolation chroot "$container" -- "$@"; }
echo "== prober --version"
in_image prober --version
echo "== short emulator run"
# In /data, the image's working directory and volume: the user it runs as must be able to write there.
in_image sh -c 'prober init && prober run --suite latency --target emulator --param "levels=[1]" \
    --param requests_per_level=6 --param warmup=0 && prober runs && prober report --out reports' 2>&1
check_done=$SECONDS

if $keep; then
    made_images=("$base")
    echo "build-image: kept $image" >&2
fi
# Removing images on vfs deletes every layer's full copy: part of what a build costs, so timed too.
cleanup
made_containers=()
made_images=()
echo "build-image: rootfs=$rootfs_state rootfs_s=$((rootfs_done - started)) import_s=$((import_done - rootfs_done))" \
    "build_s=$((build_done - import_done)) check_s=$((check_done - build_done))" \
    "cleanup_s=$((SECONDS - check_done)) total_s=$((SECONDS - started))"
