#!/usr/bin/env bash
# repro/serial_baseline/lock_hold.sh BUILD [RUNS] [BATCHES]
#
# How long the loader's mutex is held per delivered batch, for 2, 16 and 64 workers
# (batch 8, R 32, the tiny set): the bound the lock alone puts on a many-core node,
# batch / held time, beside the serial work's (run.sh). Every step any thread takes
# under the lock runs one at a time, so this is serial too, whichever thread runs it.
#
# The lock is counted in a throw-away copy of this tree's HEAD under BUILD/lock-hold
# (each lock and unlock of loader->lock in loaders/ wrapped to add TSC cycles from
# taking it to letting it go, including the waits that let it go); the shipped loader
# pays nothing for it. BUILD is this tree's build folder (repro/tiny_set.sh makes its
# tiny set). x86-64 only (the TSC).
set -euo pipefail
build=$(cd "${1:?usage: lock_hold.sh BUILD [RUNS] [BATCHES]}" && pwd)
runs=${2:-3}
batches=${3:-4000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
copy=$build/lock-hold/tree
tiny=$("$root/repro/tiny_set.sh" "$build")

rm -rf "$copy"
mkdir -p "$copy"
git -C "$root" archive HEAD | tar -x -C "$copy"
python3 - "$copy" <<'PY'
import glob, sys
copy = sys.argv[1]
def edit(path, a, b):
    s = open(path).read()
    assert a in s, (path, a)
    open(path, "w").write(s.replace(a, b))
for p in glob.glob(f"{copy}/loaders/*.c"):
    s = open(p).read()
    s = s.replace("pthread_mutex_lock(&l->lock);", "ferry_bench_lock(l);")
    s = s.replace("pthread_mutex_unlock(&l->lock);", "ferry_bench_unlock(l);")
    open(p, "w").write(s)
edit(f"{copy}/loaders/loader_internal.h", "#endif\n", """
#include <x86intrin.h>
extern unsigned long long ferry_bench_held_ticks, ferry_bench_acquisitions;
extern __thread unsigned long long ferry_bench_since;
static inline void ferry_bench_lock(ferry_loader *l) {
  pthread_mutex_lock(&l->lock);
  ferry_bench_since = __rdtsc();
  ferry_bench_acquisitions++;
}
static inline void ferry_bench_unlock(ferry_loader *l) {
  ferry_bench_held_ticks += __rdtsc() - ferry_bench_since;
  pthread_mutex_unlock(&l->lock);
}
#endif
""")
edit(f"{copy}/loaders/handoff.c", '#include "loaders/loader_internal.h"\n',
     '#include "loaders/loader_internal.h"\n\nunsigned long long ferry_bench_held_ticks, ferry_bench_acquisitions;\n'
     '__thread unsigned long long ferry_bench_since;\n'
     'void ferry_bench_counters(ferry_loader *l, unsigned long long out[2]) {\n'
     '  pthread_mutex_lock(&l->lock);\n  out[0] = ferry_bench_held_ticks;\n  out[1] = ferry_bench_acquisitions;\n'
     '  pthread_mutex_unlock(&l->lock);\n}\n')
edit(f"{copy}/loaders/handoff.c", "  ferry__cond_wait(cv, &l->lock);\n",
     "  ferry_bench_held_ticks += __rdtsc() - ferry_bench_since;\n  ferry__cond_wait(cv, &l->lock);\n"
     "  ferry_bench_since = __rdtsc();\n  ferry_bench_acquisitions++;\n")
PY
# the workers' idle wait and the coordinator's count as above: all go through ferry__loader_wait
meson setup "$copy/build" "$copy" -Dcuda=disabled > /dev/null
ninja -C "$copy/build" libferry.a > /dev/null
libs=$(pkg-config --libs libturbojpeg libpng jansson)
cc -O2 -D_GNU_SOURCE -I"$copy" -I"$copy/include" -I"$copy/build" "$here/lock_hold.c" \
  "$copy/build/libferry.a" $libs -ldl -lpthread -lm -o "$build/lock-hold/lock_hold"

ann=$tiny/annotations/instances_val2017.json
echo "workers  held_us_per_batch  acquisitions_per_batch  images_per_s   (batch 8, R 32, $batches batches)"
for i in $(seq 1 "$runs"); do
  for w in 2 16 64; do echo "$w  $("$build/lock-hold/lock_hold" "$ann" "$tiny/val2017" "$batches" "$w")"; done
done | tee "$build/lock-hold/runs.txt"
python3 - "$build/lock-hold/runs.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for w in ("2", "16", "64"):
    held = sorted(float(r[1]) for r in rows if r[0] == w)
    print(f"{w} workers: lock held {statistics.median(held):.2f} us per batch [{held[0]:.2f}, {held[-1]:.2f}]"
          f" -> the lock alone bounds batch 8 at {8 / statistics.median(held) * 1e6:,.0f} images/s")
PY
