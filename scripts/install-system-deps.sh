#!/usr/bin/env bash
# System packages the tests need, installed only when missing: PostgreSQL's server binaries,
# Prometheus Alertmanager and Pushgateway (the tests start their own throwaway instances; the
# Debian services are not used), promtool (from the prometheus package) to check the Prometheus
# export, and Chromium to load the HTML report headless, tinyproxy to test requests sent through
# an HTTP proxy, and buildah with mmdebstrap (and curl) to build the image from a local Debian base
# (scripts/build-image.sh), and
# strace, which records the connections the gateway test's LiteLLM proxy makes (tests/support/gateway.py).
set -euo pipefail

missing=()
compgen -G "/usr/lib/postgresql/*/bin/initdb" > /dev/null || missing+=(postgresql)
command -v prometheus-alertmanager > /dev/null || missing+=(prometheus-alertmanager)
command -v prometheus-pushgateway > /dev/null || missing+=(prometheus-pushgateway)
command -v promtool > /dev/null || missing+=(prometheus)
command -v chromium > /dev/null || missing+=(chromium)
command -v tinyproxy > /dev/null || missing+=(tinyproxy)
command -v buildah > /dev/null || missing+=(buildah)
command -v mmdebstrap > /dev/null || missing+=(mmdebstrap)
command -v curl > /dev/null || missing+=(curl)
command -v strace > /dev/null || missing+=(strace)

exec bash "$(dirname "$0")/apt-install-missing.sh" "${missing[@]}"
