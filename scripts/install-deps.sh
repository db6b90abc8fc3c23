#!/usr/bin/env bash
# Installs what tensorsafe needs on Debian 12: C++ libraries with apt (only
# when one is missing, so repeated runs are quick) and Python packages into the
# project's virtual environment .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  g++ cmake ninja-build pkg-config make python3-venv
  libxxhash-dev libsimdjson-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev libzstd-dev liblz4-dev
  libbz2-dev libbrotli-dev libsnappy-dev  # MDS shards: bz2, br and snappy (src/dataset/sources/mds/codecs.cc)
  libzmq3-dev cppzmq-dev liblmdb-dev libcurl4-openssl-dev nginx-light openssl
  libssl-dev  # S3 request signing: SHA-256 and HMAC (src/remote/sigv4.cc)
  clang libclang-rt-14-dev clang-format
  e2fsprogs mount  # tests/io/full_disk.sh: mkfs.ext4 and a loop mount
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: apt-get install ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# Only reinstall when the requirements changed since the last install.
stamp=.venv/.requirements.sha
want=$(cat requirements-dev.txt requirements-streaming.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
  # mosaicml-streaming's declared deps would replace torch: exact pins, no deps.
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements-streaming.txt
  echo "$want" > "$stamp"
fi
# tensorcom 0.1.0 for tests/interop/test_stream_peers.py. Its imports (pyzmq,
# braceexpand, numpy) come with requirements-dev.txt; --no-deps keeps pip from
# resolving its unpinned torch (and unused msgpack) requirements.
.venv/bin/python -c "import tensorcom.zcom" 2>/dev/null ||
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps tensorcom==0.1.0
