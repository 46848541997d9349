#!/usr/bin/env bash
# System packages the tests need, installed only when missing: PostgreSQL's server binaries and
# Prometheus Alertmanager (the tests start their own throwaway instances; the Debian services are
# not used), promtool (from the prometheus package) to check the Prometheus export, and Chromium to
# load the HTML report headless, and tinyproxy to test requests sent through an HTTP proxy.
set -euo pipefail

missing=()
compgen -G "/usr/lib/postgresql/*/bin/initdb" > /dev/null || missing+=(postgresql)
command -v prometheus-alertmanager > /dev/null || missing+=(prometheus-alertmanager)
command -v promtool > /dev/null || missing+=(prometheus)
command -v chromium > /dev/null || missing+=(chromium)
command -v tinyproxy > /dev/null || missing+=(tinyproxy)

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
# policy-rc.d keeps the packages from starting system services we do not use.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
