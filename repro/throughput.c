/* throughput: loader images/s per transfer path against the decode-only limit.
 *
 *   throughput [--annotations FILE --images DIR] [--workers N] [--batch 8]
 *              [--warmup 20] [--batches 200] [--processes 3] [--resolution 312]
 *              [--layout f32|u8] [--prefetch N] [--device host|cuda] [--dct] [--json]
 *              [--only PATH]
 *              [--decode cpu|gpu|auto] [--augment RECIPE] [--multi-scale MODE]
 *              [--patch-size 16] [--num-windows 4]
 *
 * Paths: `loader` (the loader alone: packed batches released as they arrive, no
 * transfer), `previous` (packed batch, whole-batch device copy then per-sample
 * clones), `direct` (packed batch, per-sample allocations straight from the arena)
 * and `unpacked` (per-sample pageable host allocations, then the direct path's
 * copies, each waited for as pageable memory must be: docs/transfer.md). With the
 * host backend the transfer paths' copies are CPU work on the same cores (a GPU's
 * copy engines would do them), which the `loader` row leaves out. Alongside, the
 * decode-only limit: the same JPEGs read and decoded to RGB by TurboJPEG on the same
 * number of threads. `processes` rounds each time the limit and then every path,
 * each in its own process; a path's ratio is the median over rounds of its rate
 * over the limit measured in the same round (what docs/benchmarks.md records).
 * --dct lets the loader decode JPEGs at a reduced DCT scale (not Pillow-exact; the
 * limit stays a full decode), to show what that option buys. --only PATH measures that
 * path alone, without the limit (its ratio columns are then 0): what
 * repro/python_throughput.py pairs with the Python loader's runs. --decode sets the
 * loader's config.image.decode (issue 15); a decoder that cannot open (gpu on the host
 * device, or without nvJPEG) fails before anything is measured, saying what it needs.
 * With the GPU decoder only the transfers are measured ("direct", "unpacked"): the
 * loader alone decodes no pixel and the previous path cannot carry the decode; the
 * transfer normalises to f32 [B,3,R,R] (u8 [B,R,R,3] with --layout u8), the CPU
 * paths' images, so the rates compare the same end product.
 * --augment (none, val-square, val, rfdetr-square, rfdetr) and --multi-scale (off,
 * per-sample, per-batch) set config.augment (issue 24: RF-DETR's recipes), with
 * --patch-size and --num-windows for RF-DETR's multi-scale rule (RF-DETR Seg Nano:
 * --resolution 312 --patch-size 12 --num-windows 1 gives 276..360). A training
 * recipe resizes branch B's images twice; its rate is still compared with the same
 * decode-only limit, which knows no recipe.
 * Memory per delivered batch: the bytes of its pinned arena (`pinned_bytes_per_batch`)
 * and the device memory its transfer allocates (`device_bytes_per_batch`; 0 for the
 * loader alone), means over the measured batches (the pinned bytes over every 64th,
 * so that the benchmark adds next to nothing to the serial time it measures).
 *
 * Serial time: per delivered batch, the CPU time of the loader's coordinator thread
 * plus that of the consumer (this program's main thread: next, the transfer,
 * release): `serial_us_per_batch`. Part of it is idling: going to sleep and waking
 * up when there is nothing to do yet (the loader's stats count it). A pipeline whose
 * serial threads were the bottleneck would never wait, so only the rest, the serial
 * WORK (`serial_work_us_per_batch`), bounds the rate whatever the number of
 * workers: `batch / serial work` is the ceiling those threads predict for a node with
 * unlimited cores (`predicted_ceiling_images_per_s`). `cpu_us_per_image` (JSON only):
 * the CPU time of every thread of the process over the timed batches, per image,
 * steadier than images/s on a shared machine. All are medians over rounds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/advanced.h" /* ferry_batch_layout_bytes: the arena bytes reported */
#include "ferry/ferry.h"
#include "ferry/loader.h"
#include "ferry/transfer.h"
#include "lib/transfer/packed_copy.h"
#include "repro/bench_util.h"
#include "repro/decode_limit.h"

enum { PATHS = 4, MAX_ROUNDS = 15 };

/* What one path's child process measures. */
enum { RATE, SERIAL_US, WORK_US, DEPTH, PINNED_BYTES, DEVICE_BYTES, DECODER, CPU_US, VALUES };

typedef struct options {
  bench_common data;
  const char *device;
  const char *only; /* NULL: every path and the limit */
  int warmup, batches, processes, json, dct;
  ferry_decode_mode decode;
  ferry_augment_options augment;
  int gpu_decoder; /* the loader resolved decode to the GPU (preflight) */
} options;

typedef struct path_run {
  const options *opt;
  const char *name;
  int packed, transfer; /* transfer 0: the loader alone, batches released on arrival */
  ferry__transfer_path mode;
} path_run;

static int fail(const char *what) {
  fprintf(stderr, "throughput: %s: %s\n", what, ferry_last_error());
  return 1;
}

/* The next batch, starting a new epoch when one ends. */
static ferry_status next_batch(ferry_loader *l, ferry_batch **b) {
  ferry_status st = ferry_loader_next(l, b);
  return st == FERRY_EEND ? ferry_loader_next(l, b) : st;
}

/* What the measured batches added up to. */
typedef struct tally {
  size_t images, batches;
  double pinned_bytes, device_bytes;
  size_t layouts; /* batches whose layout was added to pinned_bytes */
} tally;

/* Every this-many-th batch's layout is summed for pinned_bytes_per_batch: laying a
 * batch out again costs about a microsecond on the consumer's thread, which is the
 * serial time this benchmark measures, so it samples rather than doing it each time. */
enum { LAYOUT_SAMPLE_EVERY = 64 };

/* The bytes of a batch's layout: what its arena holds (row counts from its offsets,
 * sample sizes from the batch). */
static double layout_bytes(const ferry_batch *b) {
  size_t n = ferry_batch_num_fields(b), bs = ferry_batch_size(b), bytes = 0;
  ferry_field_spec specs[FERRY_MAX_FIELDS];
  int64_t rows[FERRY_MAX_FIELDS * 1024], hw[2 * 1024];
  if (bs > 1024) return 0;
  for (size_t f = 0; f < n; f++) {
    specs[f] = *ferry_batch_field_spec(b, f);
    const int64_t *o = ferry_batch_offsets(b, f);
    for (size_t i = 0; i < bs; i++) rows[f * bs + i] = o[i + 1] - o[i];
  }
  /* each sample's own (h, w), for fields sized per sample (a training recipe's) */
  for (size_t i = 0; i < bs; i++)
    if (ferry_batch_sample_size(b, i, &hw[2 * i], &hw[2 * i + 1]) != FERRY_OK) hw[2 * i] = hw[2 * i + 1] = 0;
  return ferry_batch_layout_bytes_sized(bs, n, specs, rows, hw, &bytes) == FERRY_OK ? (double)bytes : 0;
}

static double device_live_bytes(ferry_device *dev) {
  ferry_memory_stats m;
  ferry_memory_stats_init(&m);
  return ferry_device_memory_stats(dev, &m) == FERRY_OK ? (double)m.live_bytes : 0;
}

static ferry_status step(ferry_loader *l, ferry_device *dev, ferry_stream *s, const path_run *run,
                         tally *t) {
  ferry_batch *b;
  ferry_status st = next_batch(l, &b);
  if (st != FERRY_OK) return st;
  t->images += ferry_batch_size(b);
  if (ferry_batch_is_packed(b) && t->batches++ % LAYOUT_SAMPLE_EVERY == 0) {
    t->pinned_bytes += layout_bytes(b);
    t->layouts++;
  }
  if (!run->transfer) {
    ferry_batch_release(b);
    return FERRY_OK;
  }
  /* The GPU decoder's images tensor is made by the transfer: normalised like the CPU
   * path's f32 layout, or u8 as its u8 layout. */
  ferry_normalize norm = run->opt->data.layout == FERRY_LAYOUT_F32_CHW ? FERRY_NORMALIZE_F32 : FERRY_NORMALIZE_NONE;
  ferry_transfer_options options = {.normalize = run->opt->gpu_decoder ? norm : FERRY_NORMALIZE_NONE};
  ferry_device_batch *db;
  double live = device_live_bytes(dev);
  st = ferry__transfer_by(run->mode, dev, s, b, &options, &db);
  ferry_batch_release(b);
  if (st != FERRY_OK) return st;
  st = ferry_device_batch_wait(db);
  t->device_bytes += device_live_bytes(dev) - live;
  ferry_device_batch_free(db);
  return st;
}

/* The serial threads' CPU so far: [0] the coordinator's, [1] its idling and the
 * consumer's idling in ferry_loader_next. */
static void serial_ns(ferry_loader *l, double ns[2]) {
  ferry_loader_stats st;
  memset(&st, 0, sizeof st);
  ferry_loader_stats_init(&st);
  ferry_loader_stats_get(l, &st);
  ns[0] = (double)st.coordinator_cpu_ns;
  ns[1] = (double)(st.coordinator_idle_cpu_ns + st.consumer_idle_cpu_ns);
}

static int measure_path(void *arg, double *out) {
  const path_run *run = arg;
  const options *o = run->opt;
  ferry_device *dev;
  if (ferry_device_open(o->device, &dev) != FERRY_OK) return fail("device");
  ferry_loader_config c;
  bench_loader_config(&c, &o->data, dev);
  c.image.dct_scaling = o->dct;
  c.image.decode = o->decode;
  c.augment = o->augment;
  ferry_loader *l;
  ferry_stream *s;
  if (bench_loader_open(&c, run->packed, &l) != FERRY_OK) return fail("loader");
  if (ferry_stream_open(dev, &s) != FERRY_OK) return fail("stream");
  tally t = {0};
  for (int k = 0; k < o->warmup; k++)
    if (step(l, dev, s, run, &t) != FERRY_OK) return fail(run->name);
  t = (tally){0};
  double before[2], after[2];
  serial_ns(l, before);
  double t0 = bench_now(), cpu0 = bench_thread_cpu(), process0 = bench_process_cpu();
  for (int k = 0; k < o->batches; k++)
    if (step(l, dev, s, run, &t) != FERRY_OK) return fail(run->name);
  double consumer_ns = (bench_thread_cpu() - cpu0) * 1e9;
  out[RATE] = (double)t.images / (bench_now() - t0);
  out[CPU_US] = (bench_process_cpu() - process0) * 1e6 / (double)t.images;
  out[PINNED_BYTES] = t.layouts ? t.pinned_bytes / (double)t.layouts : 0;
  out[DEVICE_BYTES] = t.device_bytes / o->batches;
  serial_ns(l, after);
  double total_ns = consumer_ns + after[0] - before[0];
  out[SERIAL_US] = total_ns / 1e3 / o->batches;
  out[WORK_US] = (total_ns - (after[1] - before[1])) / 1e3 / o->batches;
  ferry_loader_stats st;
  ferry_loader_stats_init(&st);
  int got = ferry_loader_stats_get(l, &st) == FERRY_OK;
  out[DEPTH] = got ? (double)st.prefetch : 0;
  out[DECODER] = got ? (double)st.decoder : -1;
  ferry_stream_close(s);
  ferry_loader_close(l);
  ferry_device_close(dev);
  return 0;
}

static int measure_decode_limit(void *arg, double *out) {
  const options *o = arg;
  char **paths;
  int count;
  int want = (o->warmup + o->batches) * o->data.batch;
  if (decode_limit_list_jpegs(o->data.images, want, &paths, &count) != FERRY_OK)
    return fail("listing JPEGs");
  decode_limit_config c = {(const char *const *)paths, count, o->data.workers, DECODE_ONLY, 0, {0}};
  ferry_image_options_default(&c.options);
  double seconds;
  ferry_status st = decode_limit_run(&c, &seconds);
  decode_limit_free_paths(paths, count);
  if (st != FERRY_OK) return fail("decode-only limit");
  out[0] = count / seconds;
  return 0;
}

static const char *layout_name(ferry_image_layout l) { return l == FERRY_LAYOUT_U8_HWC ? "u8" : "f32"; }

static int usage(void) {
  fprintf(stderr, "usage: throughput [--annotations FILE --images DIR] [--workers N] [--batch N]\n"
                  "                  [--warmup N] [--batches N] [--processes N] [--resolution R]\n"
                  "                  [--layout f32|u8] [--prefetch N] [--device host|cuda] [--dct]\n"
                  "                  [--json] [--decode cpu|gpu|auto]\n"
                  "                  [--augment none|val-square|val|rfdetr-square|rfdetr]\n"
                  "                  [--multi-scale off|per-sample|per-batch]\n"
                  "                  [--patch-size N] [--num-windows N]\n"
                  "                  [--only loader|previous|direct|unpacked]\n");
  return 2;
}

static int parse(int argc, char **argv, options *o) {
  *o = (options){.device = "host", .warmup = 20, .batches = 200, .processes = 3};
  bench_common_default(&o->data);
  ferry_augment_options_default(&o->augment);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) { o->json = 1; continue; }
    if (!strcmp(a, "--dct")) { o->dct = 1; continue; }
    if (!strcmp(a, "--help")) return usage(), -1;
    if (i + 1 >= argc) return usage(), -1;
    const char *v = argv[++i];
    int common = bench_common_flag(&o->data, a, v);
    if (common < 0) return usage(), -1;
    if (common) continue;
    if (!strcmp(a, "--device")) o->device = v;
    else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
    else if (!strcmp(a, "--batches")) o->batches = atoi(v);
    else if (!strcmp(a, "--processes")) o->processes = atoi(v);
    else if (!strcmp(a, "--only")) o->only = v;
    else if (!strcmp(a, "--patch-size")) o->augment.patch_size = atoi(v);
    else if (!strcmp(a, "--num-windows")) o->augment.num_windows = atoi(v);
    else if (!strcmp(a, "--decode")) {
      if (ferry_decode_mode_parse(v, &o->decode) != FERRY_OK) return fail("--decode"), usage(), -1;
    } else if (!strcmp(a, "--augment")) {
      if (ferry_augment_parse(v, &o->augment.recipe) != FERRY_OK) return fail("--augment"), usage(), -1;
    } else if (!strcmp(a, "--multi-scale")) {
      if (ferry_multi_scale_parse(v, &o->augment.multi_scale) != FERRY_OK)
        return fail("--multi-scale"), usage(), -1;
    }
    else return usage(), -1;
  }
  if (o->data.workers < 1 || o->data.batch < 1 || o->batches < 1 || o->warmup < 0 || o->processes < 1 ||
      o->processes > MAX_ROUNDS)
    return usage(), -1;
  return 0;
}

/* One round: the decode-only limit, then every path, each in a fresh process, so
 * that a ratio compares measurements taken minutes apart at most (these machines
 * drift by more than the differences measured). limit: that round's limit;
 * paths[r]: path r's RATE, SERIAL_US and DEPTH. */
/* With the GPU decoder the loader alone decodes no pixel, and the previous path
 * cannot carry the decode (docs/images.md): only the transfers are measured. */
static int measured(const options *o, const path_run *run) {
  if (o->gpu_decoder && (!run->transfer || run->mode == FERRY__PACKED_THEN_CLONE)) return 0;
  return !o->only || !strcmp(o->only, run->name);
}

static int run_round(const options *o, const path_run *runs, double *limit, double paths[PATHS][VALUES]) {
  *limit = 0;
  if (!o->only && bench_in_processes(1, measure_decode_limit, (void *)o, 1, limit) != 0) return -1;
  int failed = 0;
  memset(paths, 0, sizeof(double) * PATHS * VALUES);
  for (int r = 0; r < PATHS; r++)
    if (measured(o, &runs[r]) &&
        bench_in_processes(1, measure_path, (void *)&runs[r], VALUES, paths[r]) != 0) {
      memset(paths[r], 0, sizeof paths[r]);
      failed = 1;
    }
  return failed ? -1 : 0;
}

/* A path's figures over the rounds. */
typedef struct path_summary {
  bench_range rate, ratio, serial_us, work_us, cpu_us;
  int depth;
  double pinned_bytes, device_bytes; /* per batch, the first round's */
  ferry_decode_mode decoder;         /* the decoder the loader ran (AUTO resolved) */
} path_summary;

static void print_row(const options *o, const char *name, const path_summary *p, double limit) {
  double ceiling = p->work_us.median > 0 ? o->data.batch * 1e6 / p->work_us.median : 0;
  if (o->json)
    printf("{\"path\": \"%s\", \"workers\": %d, \"batch\": %d, \"prefetch\": %d, "
           "\"images_per_s_median\": %.2f, \"images_per_s_min\": %.2f, "
           "\"images_per_s_max\": %.2f, \"decode_limit_images_per_s\": %.2f, \"ratio_to_limit\": %.4f, "
           "\"ratio_min\": %.4f, \"ratio_max\": %.4f, \"serial_us_per_batch\": %.2f, "
           "\"serial_us_min\": %.2f, \"serial_us_max\": %.2f, \"serial_work_us_per_batch\": %.2f, "
           "\"serial_work_us_min\": %.2f, \"serial_work_us_max\": %.2f, "
           "\"predicted_ceiling_images_per_s\": %.1f, \"dct_scaling\": %d, \"layout\": \"%s\", "
           "\"decode\": \"%s\", \"decoder\": \"%s\", \"pinned_bytes_per_batch\": %.0f, \"device_bytes_per_batch\": %.0f, "
           "\"cpu_us_per_image\": %.2f, \"augment\": \"%s\", \"multi_scale\": \"%s\"}\n",
           name, o->data.workers, o->data.batch, p->depth, p->rate.median, p->rate.min, p->rate.max, limit,
           p->ratio.median, p->ratio.min, p->ratio.max, p->serial_us.median, p->serial_us.min,
           p->serial_us.max, p->work_us.median, p->work_us.min, p->work_us.max, ceiling, o->dct,
           layout_name(o->data.layout), ferry_decode_mode_name(o->decode), ferry_decode_mode_name(p->decoder), p->pinned_bytes, p->device_bytes,
           p->cpu_us.median, ferry_augment_name(o->augment.recipe), ferry_multi_scale_name(o->augment.multi_scale));
  else
    printf("%-9s %7d %14.1f  [%8.1f, %8.1f] %12.1f %8.3f  [%.3f, %.3f] %10.1f %10.1f %12.0f\n", name,
           o->data.workers, p->rate.median, p->rate.min, p->rate.max, limit, p->ratio.median, p->ratio.min,
           p->ratio.max, p->serial_us.median, p->work_us.median, ceiling);
}

/* A decoder other than the CPU must open before anything is measured: say what it
 * needs and stop, rather than fail in every child process. */
static int preflight(options *o) {
  if (o->decode == FERRY_DECODE_CPU) return 0;
  ferry_device *dev;
  if (ferry_device_open(o->device, &dev) != FERRY_OK) return fail("device");
  ferry_loader_config c;
  bench_loader_config(&c, &o->data, dev);
  c.image.decode = o->decode;
  c.augment = o->augment;
  ferry_loader *l;
  int failed = ferry_loader_open(&c, &l) != FERRY_OK;
  ferry_loader_stats st;
  ferry_loader_stats_init(&st);
  if (failed) fprintf(stderr, "throughput: --decode %s: %s\n", ferry_decode_mode_name(o->decode), ferry_last_error());
  else if (ferry_loader_stats_get(l, &st) == FERRY_OK) o->gpu_decoder = st.decoder == FERRY_DECODE_GPU;
  if (!failed) ferry_loader_close(l);
  ferry_device_close(dev);
  return failed ? -1 : 0;
}

int main(int argc, char **argv) {
  options o;
  if (parse(argc, argv, &o) != 0) return 2;
  const path_run runs[PATHS] = {{&o, "loader", 1, 0, FERRY__DIRECT},
                                {&o, "previous", 1, 1, FERRY__PACKED_THEN_CLONE},
                                {&o, "direct", 1, 1, FERRY__DIRECT},
                                {&o, "unpacked", 0, 1, FERRY__DIRECT}};
  int first = -1; /* the first path measured */
  for (int r = PATHS - 1; r >= 0; r--)
    if (measured(&o, &runs[r])) first = r;
  if (first < 0) return usage();
  if (bench_dataset(argv[0], "build-bench-data", 1000, &o.data.annotations, &o.data.images) != 0) return 1;
  if (preflight(&o) != 0) return 1;
  /* The GPU decoder, now known, measures fewer paths. */
  first = -1;
  for (int r = PATHS - 1; r >= 0; r--)
    if (measured(&o, &runs[r])) first = r;
  if (first < 0) {
    fprintf(stderr, "throughput: --only %s measures nothing with the GPU decoder\n", o.only);
    return 2;
  }
  double limits[MAX_ROUNDS], paths[MAX_ROUNDS][PATHS][VALUES];
  int status = 0;
  for (int p = 0; p < o.processes; p++)
    if (run_round(&o, runs, &limits[p], paths[p]) != 0) status = 1;
  if (status) {
    fprintf(stderr, "throughput: a measurement failed (see above)\n");
    return 1;
  }
  double ratios[MAX_ROUNDS][PATHS];
  for (int p = 0; p < o.processes; p++)
    for (int r = 0; r < PATHS; r++) ratios[p][r] = limits[p] > 0 ? paths[p][r][RATE] / limits[p] : 0;
  bench_range limit = bench_summarise(limits, (size_t)o.processes);
  if (!o.json)
    printf("%-9s %7s %14s %21s %12s %8s  %-22s %10s %10s %12s\n", "path", "workers", "images/s med",
           "[min, max]", "decode limit", "ratio", "[min, max] (per round)", "serial us", "work us",
           "ceiling/s");
  for (int r = 0; r < PATHS; r++) {
    if (!measured(&o, &runs[r])) continue;
    double v[MAX_ROUNDS], q[MAX_ROUNDS], us[MAX_ROUNDS], work[MAX_ROUNDS], cpu[MAX_ROUNDS];
    for (int p = 0; p < o.processes; p++) {
      v[p] = paths[p][r][RATE];
      q[p] = ratios[p][r];
      us[p] = paths[p][r][SERIAL_US];
      work[p] = paths[p][r][WORK_US];
      cpu[p] = paths[p][r][CPU_US];
    }
    path_summary sum = {bench_summarise(v, (size_t)o.processes), bench_summarise(q, (size_t)o.processes),
                        bench_summarise(us, (size_t)o.processes), bench_summarise(work, (size_t)o.processes),
                        bench_summarise(cpu, (size_t)o.processes), (int)paths[0][r][DEPTH], paths[0][r][PINNED_BYTES], paths[0][r][DEVICE_BYTES],
                        (ferry_decode_mode)paths[0][r][DECODER]};
    print_row(&o, runs[r].name, &sum, limit.median);
  }
  if (!o.json)
    printf("decode-only limit: %.1f images/s median [%.1f, %.1f] over %d rounds, %d threads; "
           "loader images as %s; ratio: the median over rounds of path / limit of that round;\n"
           "serial us: coordinator + consumer CPU per batch; work us: the same less their idling "
           "(sleeping and waking);\nceiling/s: batch / work us; prefetch %d batches; decoder %s; per batch "
           "(direct): %.0f pinned bytes, %.0f device bytes; augment %s, multi-scale %s\n",
           limit.median, limit.min, limit.max, o.processes, o.data.workers,
           o.data.layout == FERRY_LAYOUT_U8_HWC ? "u8 HWC" : "f32 CHW normalised", (int)paths[0][first][DEPTH],
           ferry_decode_mode_name((ferry_decode_mode)paths[0][2][DECODER]), paths[0][2][PINNED_BYTES], paths[0][2][DEVICE_BYTES],
           ferry_augment_name(o.augment.recipe), ferry_multi_scale_name(o.augment.multi_scale));
  return 0;
}
