#!/usr/bin/env bash
# Shared by install-system-deps.sh and install-build-deps.sh: install the Debian packages named as
# arguments (already known to be missing), as root, without starting the services they ship.
set -euo pipefail
[ $# -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "missing system packages: $*; run as root or install them: apt-get install $*" >&2
    exit 1
fi
echo "installing system packages: $*" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d keeps the packages from starting system services we do not use.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get install -y -qq --no-install-recommends "$@" > /dev/null
