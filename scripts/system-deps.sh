#!/usr/bin/env bash
# Installs the system packages the test suite uses (PostgreSQL, Redis, Chromium, libfaketime for the fault
# suite's clock steps) when they are missing.
set -euo pipefail
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
fc-list 2>/dev/null | grep -qi dejavu || need+=(fonts-dejavu-core)
ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || need+=(faketime)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "installing system packages: ${need[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
