#!/usr/bin/env bash
# System packages the tests need: PostgreSQL's server binaries (the tests start their own
# throwaway cluster; the Debian service is not used). Installed only when missing.
set -euo pipefail

missing=()
compgen -G "/usr/lib/postgresql/*/bin/initdb" > /dev/null || missing+=(postgresql)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing system packages: ${missing[*]}; run as root or install them: apt-get install ${missing[*]}" >&2
    exit 1
fi
echo "installing system packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d keeps the package from starting a system cluster we do not use.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
