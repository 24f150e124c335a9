#!/usr/bin/env bash
# repro/plots.sh BUILD_DIR [--replot]: measure (unless --replot), then draw docs/img/throughput.png (images/s per
# path and worker count, with the decode-only limit) and docs/img/peak.png (extra
# device peak per mask size, previous vs direct path). Data lands in docs/data/.
# Run by `./run plots`. Takes a few minutes: every figure is a median of 3 rounds, each
# round one process per path and one for the decode-only limit.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
data=$root/docs/data img=$root/docs/img
mkdir -p "$data" "$img"
if [ "${2:-}" != "--replot" ]; then
  set -- ${FERRY_PLOT_ARGS:-}
  : > "$data/throughput.jsonl"
  for w in 1 2; do
    "$build/repro/throughput" --workers "$w" --json "$@" >> "$data/throughput.jsonl"
  done
  "$build/repro/cuda_peak_memory" --json > "$data/peak.jsonl"
fi

python3 - "$data" <<'PY'
import json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/throughput.jsonl") if l.strip()]
paths = ["loader", "previous", "direct", "unpacked"]
with open(f"{d}/throughput.dat", "w") as out:
    out.write("# workers " + " ".join(f"{p} {p}_min {p}_max" for p in paths) + " limit\n")
    for w in sorted({r["workers"] for r in rows}):
        by = {r["path"]: r for r in rows if r["workers"] == w}
        cells = " ".join(f'{by[p]["images_per_s_median"]} {by[p]["images_per_s_min"]} {by[p]["images_per_s_max"]}' for p in paths)
        out.write(f'{w} {cells} {by["direct"]["decode_limit_images_per_s"]}\n')
peak = [json.loads(l) for l in open(f"{d}/peak.jsonl") if l.strip()]
with open(f"{d}/peak.dat", "w") as out:
    out.write("# size mask_mib previous_mib direct_mib\n")
    for r in peak:
        if r["backend"] != "host" or r["path"] != "previous":
            continue
        direct = next(x for x in peak if x["backend"] == "host" and x["size"] == r["size"] and x["path"] == "direct")
        out.write(f'"{r["size"]}" {r["mask_bytes"] / 2**20:.3f} {r["extra_peak_bytes"] / 2**20:.3f} {direct["extra_peak_bytes"] / 2**20:.3f}\n')
PY

gnuplot <<GP
load "$root/repro/plot_style.gp"
set output "$img/throughput.png"
set title "Loader throughput at 312x312 with masks (medians of 3 rounds; ranges in benchmarks.md)"
set ylabel "images/s"; set xlabel "workers"; set key top left
set style data histogram; set style histogram clustered gap 2; set style fill solid 0.6 border -1
set yrange [0:*]
plot "$data/throughput.dat" using 2:xtic(1) title "loader (no transfer)", \
     "" using 5 title "previous", "" using 8 title "direct", "" using 11 title "unpacked", \
     "" using 14 title "decode-only limit" fs pattern 4
set output "$img/peak.png"
set title "Extra device peak beyond the returned tensors (host backend)"
set ylabel "MiB"; set xlabel "mask batch"; set style histogram clustered gap 2
plot "$data/peak.dat" using 2:xtic(1) title "mask bytes", "" using 3 title "previous path", \
     "" using 4 title "direct path"
GP
echo "wrote $img/throughput.png and $img/peak.png (data in $data)"
