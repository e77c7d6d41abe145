#!/usr/bin/env bash
# The system packages oncelog's commands need, installed only when missing (issue 26).
#
#   scripts/system-deps.sh [build] [java] [postgresql] [test]     (no argument: all of them)
#
#   build  python3 with venv/ensurepip, make, a C compiler and Python's headers (`make venv`
#          compiles src/oncelog/protocol/_recordwalk.c)
#   java   a Java runtime (PySpark: `make demo` and the Spark tests)
#   postgresql  PostgreSQL's server binaries (`make cluster`; tests/pgserver.py starts its own
#          server from them, as an unprivileged user)
#   test   what the whole test suite needs besides `build`: java, postgresql, Debian's
#          Chromium (the console's browser test, tests/browser.py), and for librdkafka's own
#          tests (tests/suites/, built from the npm package's sources): npm, g++, zlib's headers
#
# Called by `.ci/run` and by the Makefile (`make venv`, `make demo`, `make test`), so the
# README's two commands are the whole set-up on a fresh Debian/Ubuntu machine. Silent and quick
# (no package manager run) when everything is there; apt-get only for what is missing (as root,
# or through `sudo -n`); a package it cannot install stops it with a message naming the
# package and a non-zero exit: the suite then never runs without what it needs (its tests
# fail rather than skip, but an install failure is clearer said here).
set -euo pipefail

PYTHON="${PYTHON:-python3}"
missing=()   # Debian package names

want() { missing+=("$1"); }

check_build() {
  command -v "$PYTHON" >/dev/null 2>&1 || { want python3; want python3-venv; want python3-dev; return; }
  command -v make >/dev/null 2>&1 || want make
  "$PYTHON" -c "import venv, ensurepip" >/dev/null 2>&1 || want python3-venv
  command -v gcc >/dev/null 2>&1 || want gcc
  "$PYTHON" -c "import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
    >/dev/null 2>&1 || want python3-dev
}

check_java() {
  command -v java >/dev/null 2>&1 || want openjdk-17-jre-headless
}

check_postgresql() {
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || want postgresql
}

check_test() {
  check_java
  check_postgresql
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || want chromium
  command -v npm >/dev/null 2>&1 || want npm
  command -v g++ >/dev/null 2>&1 || want g++
  [ -e /usr/include/zlib.h ] || want zlib1g-dev
}

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(build java test)
check() {
  missing=()
  for part in "${parts[@]}"; do
    case "$part" in
      build) check_build ;;
      java) check_java ;;
      postgresql) check_postgresql ;;
      test) check_test ;;
      *) echo "system-deps.sh: unknown part '$part' (build, java, postgresql, test)" >&2; exit 2 ;;
    esac
  done
}
check

[ ${#missing[@]} -eq 0 ] && exit 0
# shellcheck disable=SC2207
missing=($(printf '%s\n' "${missing[@]}" | sort -u))

fail() {
  echo "system-deps.sh: cannot install ${missing[*]}: $1" >&2
  echo "system-deps.sh: install them yourself (e.g. sudo apt-get install -y ${missing[*]}) and run again" >&2
  exit 1
}

if ! command -v apt-get >/dev/null 2>&1; then
  fail "no apt-get on this machine"
fi
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
    as_root=(sudo -n)
  else
    fail "not root, and sudo cannot run without a password"
  fi
fi
echo "system-deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -q || fail "apt-get update failed"
"${as_root[@]}" apt-get install -y -q "${missing[@]}" || fail "apt-get install failed"
missing_before=("${missing[@]}")
check
if [ ${#missing[@]} -ne 0 ]; then
  fail "still missing after apt-get install ${missing_before[*]}"
fi
