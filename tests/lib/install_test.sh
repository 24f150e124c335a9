#!/usr/bin/env bash
# Install into a temporary DESTDIR, then build and run a program against the
# installed headers and library using nothing but `pkg-config --cflags --libs ferry`.
set -euo pipefail
build_root=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build_root" --destdir "$tmp" --no-rebuild --quiet >/dev/null
pc=$(find "$tmp" -name ferry.pc | head -n1)
[ -n "$pc" ] || { echo "ferry.pc was not installed"; exit 1; }
# Libs.private: each flag once, libraries by -l (not a build machine's absolute paths).
private=$(sed -n 's/^Libs.private: *//p' "$pc")
dups=$(printf '%s\n' $private | sort | uniq -d)
[ -z "$dups" ] || { echo "ferry.pc: Libs.private repeats: $dups ($private)"; exit 1; }
case " $private " in *" /"*) echo "ferry.pc: Libs.private has absolute paths: $private"; exit 1 ;; esac
if grep -q '^#define FERRY_HAVE_CUDA 1' "$build_root/ferry_config.h"; then
  [ "$(printf '%s\n' $private | grep -c -- '-lcudart')" = 1 ] ||
    { echo "ferry.pc: a CUDA build's Libs.private must list -lcudart once: $private"; exit 1; }
fi
prefix=$(sed -n 's/^prefix=//p' "$pc")
export PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --define-variable=prefix="$tmp$prefix" --cflags --libs ferry)
cat > "$tmp/hello.c" <<'C'
#include <stdio.h>
#include <ferry/ferry.h>
int main(void) {
  ferry_device *d;
  if (ferry_device_open("host", &d) != FERRY_OK) return 1;
  ferry_tensor t;
  int64_t shape[2] = {2, 3};
  if (ferry_tensor_alloc(&t, d, NULL, FERRY_F32, 2, shape) != FERRY_OK) return 2;
  ferry_memory_stats s;
  ferry_memory_stats_init(&s);
  ferry_device_memory_stats(d, &s);
  ferry_tensor_free(&t);
  ferry_device_close(d);
  printf("installed ferry works: %llu live bytes while the tensor lived\n",
         (unsigned long long)s.live_bytes);
  return s.live_bytes == 24 ? 0 : 3;
}
C
cc -std=c11 "$tmp/hello.c" -o "$tmp/hello" $flags
libdir=$(pkg-config --define-variable=prefix="$tmp$prefix" --variable=libdir ferry)
LD_LIBRARY_PATH=$libdir "$tmp/hello"
