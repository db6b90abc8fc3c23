#!/usr/bin/env bash
# On a real, nearly full ext4 filesystem (a loop-mounted 64 MiB image; with
# under 1 GiB free the writer reserves no blocks ahead):
#  - a file 6 MiB short of the free space is written, verifies, and holds no
#    blocks past its end;
#  - a file that does not fit fails with exit 4 (I/O) naming ENOSPC and the
#    file, leaves no temp file, and the free space is what it was before.
# Needs root and a loop device; exits 77 (skip) without them.
# Usage: full_disk.sh TENSORSAFE_CLI
set -euo pipefail
CLI=$1
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to mount a filesystem"; exit 77; }
command -v mkfs.ext4 >/dev/null || { echo "SKIP: no mkfs.ext4"; exit 77; }
TMP=$(mktemp -d)
MNT=$TMP/mnt
cleanup() {
  mountpoint -q "$MNT" && umount "$MNT"
  rm -rf "$TMP"
}
trap cleanup EXIT
truncate -s 64M "$TMP/fs.img"
mkfs.ext4 -q -F -m 0 "$TMP/fs.img"
mkdir "$MNT"
mount -o loop "$TMP/fs.img" "$MNT" 2>/dev/null || { echo "SKIP: cannot loop-mount an image"; exit 77; }

avail() { sync -f "$MNT"; df --output=avail -B1 "$MNT" | tail -1 | tr -d ' '; }

# A u8 .npy of N bytes (version 1.0 header padded to 64 bytes).
make_npy() {
  local n=$1 out=$2
  local dict="{'descr': '|u1', 'fortran_order': False, 'shape': ($n,), }"
  local pad=$((64 - (10 + ${#dict} + 1) % 64))
  [ "$pad" = 64 ] && pad=0
  {
    printf '\x93NUMPY\x01\x00'
    local len=$((${#dict} + pad + 1))
    printf "\\x$(printf %02x $((len % 256)))\\x$(printf %02x $((len / 256)))"
    printf '%s%*s\n' "$dict" "$pad" ''
    head -c "$n" /dev/urandom
  } >"$out"
}

FREE=$(avail)
MiB=$((1024 * 1024))

# Fits: 6 MiB short of the free space.
make_npy $((FREE - 6 * MiB)) "$TMP/fits.npy"
"$CLI" convert -q "$TMP/fits.npy" "$MNT/fits.tsafe"
"$CLI" verify "$MNT/fits.tsafe" >/dev/null
ls -A "$MNT" | grep -q '\.tmp-' && { echo "FAIL: temp file left after a write that fit"; ls -la "$MNT"; exit 1; }
# The finished file holds no reserved blocks past its end.
size=$(stat -c %s "$MNT/fits.tsafe")
alloc=$(($(stat -c %b "$MNT/fits.tsafe") * $(stat -c %B "$MNT/fits.tsafe")))
[ "$alloc" -lt $((size + MiB)) ] || { echo "FAIL: $alloc bytes allocated for a $size-byte file"; exit 1; }
rm "$MNT/fits.tsafe"

# Does not fit: 4 MiB more than is free.
FREE=$(avail)
make_npy $((FREE + 4 * MiB)) "$TMP/big.npy"
set +e
"$CLI" convert -q "$TMP/big.npy" "$MNT/big.tsafe" 2>"$TMP/err"
rc=$?
set -e
[ "$rc" = 4 ] || { echo "FAIL: exit $rc for a file larger than the disk, expected 4"; cat "$TMP/err"; exit 1; }
grep -q "No space left on device" "$TMP/err" || { echo "FAIL: error does not name ENOSPC:"; cat "$TMP/err"; exit 1; }
grep -q "$MNT/big.tsafe" "$TMP/err" || { echo "FAIL: error does not name the file:"; cat "$TMP/err"; exit 1; }
[ -z "$(ls -A "$MNT" | grep -v '^lost+found$')" ] || { echo "FAIL: left behind:"; ls -la "$MNT"; exit 1; }
AFTER=$(avail)
[ "$AFTER" -ge $((FREE - 64 * 1024)) ] || { echo "FAIL: free space $FREE before, $AFTER after"; exit 1; }
echo "ok: fit and overflow on a $((FREE / MiB)) MiB-free ext4"
