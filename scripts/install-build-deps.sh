#!/usr/bin/env bash
# What building the local llama-server needs (prober/local_build.py), installed only when missing:
# a C++ compiler and cmake; ninja makes the build a little faster; objdump (binutils) lets the tests
# check the binary holds no AMX instructions.
set -euo pipefail

missing=()
command -v cmake > /dev/null || missing+=(cmake)
command -v g++ > /dev/null || missing+=(g++)
command -v ninja > /dev/null || missing+=(ninja-build)
command -v objdump > /dev/null || missing+=(binutils)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing build tools: ${missing[*]}; run as root or install them: apt-get install ${missing[*]}" >&2
    exit 1
fi
echo "installing build tools: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
