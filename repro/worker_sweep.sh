#!/usr/bin/env bash
# repro/worker_sweep.sh [BUILD_DIR] [--replot | THROUGHPUT_ARGS...]: how the loader's
# images/s scales with its worker count when decoding costs almost nothing, so that
# what limits it is the per-batch work that does not run in parallel.
#
# Makes BUILD/bench-tiny once (600 synth_coco images, longer side 80, seed 0), runs
# BUILD/repro/throughput --json at resolution 32 for each worker count, keeps every
# row (all paths) in BUILD/worker_sweep.jsonl, prints the loader rows as a table and,
# when gnuplot is installed, draws docs/img/worker_sweep.png. --replot redraws from
# the existing jsonl without measuring. Other arguments go to throughput as they are.
# Environment: SWEEP_WORKERS (default "2 4 8 16"), SWEEP_PROCESSES (rounds, each a
# fresh process per path; default 3), SWEEP_BATCH (default 8).
set -euo pipefail
build=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  build=$1
  shift
fi
root=$(cd "$(dirname "$0")/.." && pwd)
tiny=$build/bench-tiny
rows=$build/worker_sweep.jsonl

make_tiny_set() {
  "$root/repro/tiny_set.sh" "$build" > /dev/null
}

# Appends to a temporary file first, so an interrupted sweep leaves the last whole one.
measure() {
  local w partial=$rows.partial
  : > "$partial"
  for w in ${SWEEP_WORKERS:-2 4 8 16}; do
    echo "workers $w ..." >&2
    "$build/repro/throughput" --annotations "$tiny/annotations/instances_val2017.json" \
      --images "$tiny/val2017" --resolution 32 --batch "${SWEEP_BATCH:-8}" --json \
      --processes "${SWEEP_PROCESSES:-3}" --workers "$w" "$@" >> "$partial"
  done
  mv "$partial" "$rows"
}

# The loader rows as a table on stdout and as gnuplot data in BUILD/worker_sweep.dat.
# serial_us_per_batch and predicted_ceiling_images_per_s are newer fields of
# throughput's JSON: shown when the rows have them.
tabulate() {
  python3 - "$rows" "$build/worker_sweep.dat" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
loader = sorted((r for r in rows if r["path"] == "loader"), key=lambda r: r["workers"])
if not loader:
    sys.exit("worker_sweep: no loader rows in " + sys.argv[1])
base = loader[0]
optional = [(k, t) for k, t in (("serial_us_per_batch", "serial us/batch"),
                                 ("predicted_ceiling_images_per_s", "predicted img/s"))
            if any(k in r for r in loader)]
head = ["workers", "loader img/s median [min, max]", f"x {base['workers']} workers",
        "decode limit", "ratio to limit"] + [t for _, t in optional]
print(" | ".join(head))
with open(sys.argv[2], "w") as dat:
    dat.write("# workers median min max decode_limit ratio_to_limit\n")
    for r in loader:
        m = r["images_per_s_median"]
        cells = [str(r["workers"]),
                 f'{m:.1f} [{r["images_per_s_min"]:.1f}, {r["images_per_s_max"]:.1f}]',
                 f'{m / base["images_per_s_median"]:.2f}',
                 f'{r["decode_limit_images_per_s"]:.1f}', f'{r["ratio_to_limit"]:.3f}']
        cells += [f"{r[k]:.1f}" if k in r else "-" for k, _ in optional]
        print(" | ".join(cells))
        dat.write(f'{r["workers"]} {m} {r["images_per_s_min"]} {r["images_per_s_max"]} '
                  f'{r["decode_limit_images_per_s"]} {r["ratio_to_limit"]}\n')
PY
}

plot() {
  if ! command -v gnuplot > /dev/null; then
    echo "gnuplot not installed: no plot (data in $build/worker_sweep.dat)" >&2
    return
  fi
  mkdir -p "$root/docs/img"
  gnuplot <<GP
load "$root/repro/plot_style.gp"
set output "$root/docs/img/worker_sweep.png"
set title "Loader on tiny images (longer side 80, resolution 32): images/s by workers"
set xlabel "workers"; set logscale x 2; set xtics 2; set key below
set ylabel "images/s"; set yrange [0:*]
set y2label "loader / decode-only limit"; set y2range [0:*]; set y2tics; set ytics nomirror
plot "$build/worker_sweep.dat" using 1:2:3:4 with yerrorlines lw 2 title "loader median [min, max]", \
     "" using 1:5 with linespoints lw 2 title "decode-only limit", \
     "" using 1:6 axes x1y2 with linespoints dt 2 title "ratio (right axis)"
GP
  echo "wrote $root/docs/img/worker_sweep.png" >&2
}

if [ "${1:-}" != "--replot" ]; then
  make_tiny_set
  measure "$@"
fi
tabulate
plot
