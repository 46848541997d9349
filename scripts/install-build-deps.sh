#!/usr/bin/env bash
# What building the local llama-server needs (prober/local/build.py), installed only when missing:
# a C++ compiler and cmake; ninja makes the build a little faster; objdump (binutils) lets the tests
# check the binary holds no AMX instructions.
set -euo pipefail

missing=()
command -v cmake > /dev/null || missing+=(cmake)
command -v g++ > /dev/null || missing+=(g++)
command -v ninja > /dev/null || missing+=(ninja-build)
command -v objdump > /dev/null || missing+=(binutils)

exec bash "$(dirname "$0")/apt-install-missing.sh" "${missing[@]}"
