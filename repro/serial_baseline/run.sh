#!/usr/bin/env bash
# repro/serial_baseline/run.sh BUILD [RUNS] [BATCHES]
#
# The loader's serial work per batch (coordinator + consumer CPU, less what they
# spend in their waits) on the code before the scaling work (ca9f8bc) and on this
# tree, measured by one harness (serial_pair.c) in alternating runs, so that both
# see the same machine. ca9f8bc reports no idle time of its own: its three
# pthread_cond_wait calls are wrapped here, in a throw-away worktree, by the same
# measure the current loader uses (CPU clock read around the wait).
#
# BUILD is this tree's build folder (built; repro/tiny_set.sh makes its tiny set).
# Prints one line per run and the medians.
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD [RUNS] [BATCHES]}" && pwd)
runs=${2:-8}
batches=${3:-4000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$build/serial-baseline
old=$work/ca9f8bc
tiny=$("$root/repro/tiny_set.sh" "$build")
mkdir -p "$work"

if [ ! -f "$old/build/libferry.a" ]; then
  rm -rf "$old"
  git -C "$root" worktree add --detach -f "$old" ca9f8bc > /dev/null
  python3 - "$old" <<'PY'
import sys
old = sys.argv[1]
def edit(path, a, b, count=-1):
    p = f"{old}/{path}"
    s = open(p).read()
    assert a in s, (path, a)
    open(p, "w").write(s.replace(a, b, count))
edit("loaders/loader_internal.h", "#endif\n", """
#include <time.h>
extern uint64_t ferry_bench_idle_ns[2]; /* [0] coordinator, [1] consumer */
static inline uint64_t ferry_bench_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
static inline void ferry_bench_wait(pthread_cond_t *cv, pthread_mutex_t *m, int role) {
  uint64_t before = ferry_bench_cpu();
  pthread_cond_wait(cv, m);
  ferry_bench_idle_ns[role] += ferry_bench_cpu() - before;
}
#endif
""")
edit("loaders/coordinator.c", "pthread_cond_wait(&l->changed, &l->lock);",
     "ferry_bench_wait(&l->changed, &l->lock, 0);")
edit("loaders/loader.c", "pthread_cond_wait(&l->changed, &l->lock);",
     "ferry_bench_wait(&l->changed, &l->lock, 1);")
edit("loaders/loader.c", '#include "loaders/loader_internal.h"',
     '#include "loaders/loader_internal.h"\n\nuint64_t ferry_bench_idle_ns[2];', 1)
# What serial_pair.c reads of this tree's internals, read here, inside its loader, so
# that serial_pair.c includes only the public API.
with open(f"{old}/loaders/loader.c", "a") as f:
    f.write('''
void ferry_bench_serial(ferry_loader *l, double out[3]);
void ferry_bench_serial(ferry_loader *l, double out[3]) {
  clockid_t c;
  struct timespec ts;
  pthread_getcpuclockid(l->coordinator, &c);
  pthread_mutex_lock(&l->lock);
  clock_gettime(c, &ts);
  out[0] = ts.tv_sec * 1e9 + ts.tv_nsec;
  out[1] = (double)ferry_bench_idle_ns[0];
  out[2] = (double)ferry_bench_idle_ns[1];
  pthread_mutex_unlock(&l->lock);
}
''')
PY
  meson setup "$old/build" "$old" -Dcuda=disabled > /dev/null
  ninja -C "$old/build" libferry.a > /dev/null
fi

libs=$(pkg-config --libs libturbojpeg libpng jansson)
cuda=()
if grep -q "FERRY_HAVE_CUDA 1" "$build/ferry_config.h"; then
  cuda=(-L"${CUDA_PATH:-/usr/local/cuda}/lib64" -lcudart -Wl,-rpath,"${CUDA_PATH:-/usr/local/cuda}/lib64")
fi
cc -O2 -D_GNU_SOURCE -DOLD -I"$old" -I"$old/include" -I"$old/build" "$here/serial_pair.c" \
  "$old/build/libferry.a" $libs -lpthread -lm -o "$work/serial_old"
cc -O2 -D_GNU_SOURCE -I"$root" -I"$root/include" -I"$build" "$here/serial_pair.c" \
  "$build/libferry.a" $libs "${cuda[@]}" -ldl -lpthread -lm -o "$work/serial_new"

ann=$tiny/annotations/instances_val2017.json
echo "code     serial_us  serial_work_us  consumer_work_us  coordinator_work_us   (16 workers, batch 8, R 32, $batches batches)"
for i in $(seq 1 "$runs"); do
  echo "ca9f8bc  $("$work/serial_old" "$ann" "$tiny/val2017" "$batches")"
  echo "now      $("$work/serial_new" "$ann" "$tiny/val2017" "$batches")"
done | tee "$work/runs.txt"
python3 - "$work/runs.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
old = [float(r[2]) for r in rows if r[0] == "ca9f8bc"]
new = [float(r[2]) for r in rows if r[0] == "now"]
ratio = sorted(o / n for o, n in zip(old, new))
print(f"serial work: ca9f8bc {statistics.median(old):.2f} us, now {statistics.median(new):.2f} us; "
      f"ceiling ratio median {statistics.median(ratio):.2f}x [{ratio[0]:.2f}, {ratio[-1]:.2f}]")
for name, col in (("consumer", 3), ("coordinator", 4)):
    o = statistics.median(float(r[col]) for r in rows if r[0] == "ca9f8bc")
    n = statistics.median(float(r[col]) for r in rows if r[0] == "now")
    print(f"  of which the {name}'s: ca9f8bc {o:.2f} us, now {n:.2f} us")
PY
