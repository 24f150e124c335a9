/* train_loop: a small, real training loop in C, fed by ferry.
 *
 *   train_loop --annotations FILE --images DIR [--epochs 5] [--device host|cuda]
 *              [--batch 8] [--resolution 64] [--workers N] [--on-error skip|fail]
 *              [--decode cpu|gpu|auto] [--augment none|val-square|val|rfdetr-square|rfdetr]
 *              [--multi-scale off|per-sample|per-batch]
 *              [--lr 0.05] [--resume-test] [--checkpoint FILE] [--print-steps]
 *
 * The command line is example_args.c's, shared with demo (train_loop --help).
 *
 * The model is deliberately tiny, so that the loop around it is what you read:
 *   features  the mean of each normalised colour channel over each image quadrant
 *             (12 numbers) plus a constant 1;
 *   heads     two linear maps of those 13 features, one predicting the centre
 *             (cx, cy in [0, 1]) of EVERY instance of the image, one predicting the
 *             fraction of each quadrant covered by the union of its instance masks;
 *   loss      mean squared error of the centres over the batch's instances, plus
 *             that of the coverages over its images; plain gradient descent.
 * It cannot tell instances apart (it sees only the image), so the loss falls towards
 * the spread of the centres around what the image predicts, not to zero.
 *
 * What the loop shows:
 *   - epochs follow one another automatically: ferry_loader_next returns FERRY_EEND at
 *     the end of one and the next call starts the next, shuffled from seed + epoch
 *     (ferry_loader_set_epoch jumps to an epoch, like DistributedSampler.set_epoch);
 *   - the loader's workers decode ahead (config.prefetch batches) while this thread
 *     computes, and batch k+1's transfer is queued on a second stream before batch k
 *     is trained on, so copies overlap compute too;
 *   - each step ferries a batch with ferry_transfer: the images become one [B,3,R,R]
 *     f32 tensor, normalised on the device from u8 (4x fewer bytes over the bus), and
 *     every sample's boxes and masks their own device allocations, which the step
 *     frees one by one as soon as it has used them;
 *   - --augment rfdetr (RF-DETR's training recipe: flips, multi-scale, random crops)
 *     gives every sample its own size: the images are then one [3,h,w] tensor per
 *     sample, and the masks [N,h,w]; the model reads each at its size. The draws are
 *     keyed by (seed, epoch, sample), so a resumed run replays them exactly;
 *   - the packed batch is released right after ferry_transfer: its arena goes back to
 *     the pool when the copies have read it;
 *   - on CUDA the model's arithmetic still runs here, on the host: the tensors it
 *     reads are copied back with ferry_memcpy (D2H, synchronous);
 *   - --resume-test saves a checkpoint mid-epoch (the loader's state, the weights and
 *     the epoch's running loss), opens a SECOND loader, restores the state into it,
 *     finishes the run and checks that every later step's loss equals the
 *     uninterrupted run's bit for bit.
 * Everything printed on stdout is a function of the data and the options: the loader
 * is deterministic whatever its worker count, and the arithmetic is single-threaded.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_args.h"
#include "ferry/ferry.h"
#include "ferry/loader.h"
#include "ferry/transfer.h"

#define NFEAT 13  /* 3 channels x 4 quadrants + a constant */
#define NCENTRE 2 /* cx, cy */
#define NQUAD 4

typedef struct model {
  double centre[NCENTRE][NFEAT];
  double cover[NQUAD][NFEAT];
} model;

/* Losses summed over an epoch's steps (each step's loss is its batch's mean). */
typedef struct epoch_sums {
  double total, centre, cover;
  uint64_t steps;
} epoch_sums;

/* What a run needs to continue exactly where another stopped. Written to a file as
 * it is: a checkpoint is read back by the program (and machine) that wrote it. */
typedef struct checkpoint {
  char magic[8];
  ferry_loader_state loader; /* as ferry_loader_state_get gave it */
  uint64_t steps_done;       /* since the start of training */
  epoch_sums epoch;          /* the interrupted epoch's running sums */
  model weights;
} checkpoint;

static const char CHECKPOINT_MAGIC[8] = "FERRYCK1";

typedef struct options {
  example_common common; /* annotations, images, device, batch, workers, ... */
  const char *checkpoint_path;
  int resume_test, print_steps;
  double lr;
} options;

/* Everything a training run uses. */
typedef struct trainer {
  const options *opt;
  ferry_device *device;
  ferry_stream *streams[2]; /* batch k transfers on streams[k % 2] */
  ferry_transfer_options transfer;
  model weights;
  uint64_t steps_done;
  double *losses;           /* every step's loss, for the resume check */
  uint64_t max_steps;
  void *host_images;        /* CUDA only: read-back buffers, grown as needed */
  size_t host_images_bytes;
  void *host_field;
  size_t host_field_bytes;
  /* the checkpoint to write after step `save_after` (UINT64_MAX: none) */
  uint64_t save_after;
  FILE *save_to;
} trainer;

/* A batch whose transfer has been queued, and where the loader stood right after
 * handing it out: the state to save once this batch has been trained on. */
typedef struct inflight {
  ferry_device_batch *batch;
  ferry_loader_state after;
} inflight;

static int fail(const char *what) {
  fprintf(stderr, "train_loop: %s: %s\n", what, ferry_last_error());
  return 1;
}

/* ---- reading device tensors from the host ----------------------------------- */

static int grow(void **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  void *p = realloc(*buf, need);
  if (!p) return -1;
  *buf = p;
  *cap = need;
  return 0;
}

/* A host-readable pointer to the tensor's bytes. On the host backend that is the
 * tensor itself; on CUDA the bytes are copied into *buf, ordered after the transfer
 * on the batch's stream. NULL for an empty tensor, or on error (with *st set). */
static const void *read_back(trainer *t, ferry_stream *stream, const ferry_tensor *tensor,
                             void **buf, size_t *cap, ferry_status *st) {
  *st = FERRY_OK;
  if (tensor->nbytes == 0) return NULL;
  if (ferry_device_get_kind(t->device) == FERRY_DEVICE_HOST) return tensor->data;
  if (grow(buf, cap, tensor->nbytes) != 0) {
    *st = FERRY_ENOMEM;
    fprintf(stderr, "train_loop: out of host memory for a %zu-byte read-back\n", tensor->nbytes);
    return NULL;
  }
  /* *buf is plain malloc'd memory: a synchronous copy, as asynchronous ones need
   * pinned memory (device.h). */
  *st = ferry_memcpy(stream, *buf, tensor->data, tensor->nbytes, FERRY_COPY_D2H);
  return *st == FERRY_OK ? *buf : NULL;
}

/* ---- the model ---------------------------------------------------------------- */

/* The quadrant of pixel (y, x) in an h x w image: 0 1 over 2 3. */
static int quadrant(int y, int x, int h, int w) { return (y >= h / 2) * 2 + (x >= w / 2); }

/* Mean of each channel over each quadrant of one normalised [3,h,w] image (0 for a
 * quadrant a 1-pixel-wide image does not have). */
static void image_features(const float *chw, int h, int w, double feat[NFEAT]) {
  double count[NQUAD] = {0};
  memset(feat, 0, NFEAT * sizeof feat[0]);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) count[quadrant(y, x, h, w)] += 1;
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++)
        feat[quadrant(y, x, h, w) * 3 + c] += chw[((size_t)c * h + y) * w + x];
  for (int q = 0; q < NQUAD; q++)
    for (int c = 0; c < 3; c++) feat[q * 3 + c] = count[q] ? feat[q * 3 + c] / count[q] : 0;
  feat[NFEAT - 1] = 1.0;
}

/* Fraction of each quadrant covered by the union of n masks [n,h,w]. */
static void mask_coverage(const uint8_t *masks, int64_t n, int h, int w, double cover[NQUAD]) {
  double count[NQUAD] = {0}, hit[NQUAD] = {0};
  size_t plane = (size_t)h * w;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int q = quadrant(y, x, h, w), any = 0;
      for (int64_t i = 0; i < n && !any; i++) any = masks[(size_t)i * plane + (size_t)y * w + x];
      count[q] += 1;
      hit[q] += any;
    }
  for (int q = 0; q < NQUAD; q++) cover[q] = count[q] ? hit[q] / count[q] : 0;
}

static double dot(const double w[NFEAT], const double f[NFEAT]) {
  double s = 0;
  for (int k = 0; k < NFEAT; k++) s += w[k] * f[k];
  return s;
}

/* Squared error of one linear output; its gradient, scaled by `weight`, is added to g. */
static double fit(const double w[NFEAT], const double f[NFEAT], double target, double weight,
                  double g[NFEAT]) {
  double err = dot(w, f) - target;
  for (int k = 0; k < NFEAT; k++) g[k] += weight * 2 * err * f[k];
  return err * err;
}

/* One sample's targets, as read from its device tensors. */
typedef struct sample_targets {
  double feat[NFEAT];
  double cover[NQUAD];
} sample_targets;

/* ---- one training step ------------------------------------------------------------ */

/* Free every per-sample tensor of sample s, each on its own: they are independent
 * allocations, and nothing else in the batch notices. */
static void free_sample(ferry_device_batch *db, size_t s) {
  for (size_t k = 0; k < ferry_device_batch_num_fields(db); k++) {
    ferry_tensor t;
    if (ferry_device_batch_take(db, s, ferry_device_batch_field_name(db, k), &t) == FERRY_OK)
      ferry_tensor_free(&t);
  }
}

/* Read sample s's boxes and masks; add its centre errors (and their gradient) to
 * *centre_loss / g_centre. The box format is cx, cy, w, h over the image size. */
static ferry_status read_sample(trainer *t, ferry_device_batch *db, size_t s,
                                sample_targets *out, double *centre_loss, uint64_t *instances,
                                double g_centre[NCENTRE][NFEAT]) {
  ferry_stream *stream = ferry_device_batch_stream(db);
  ferry_tensor *boxes = ferry_device_batch_sample_field(db, s, FERRY_FIELD_BOXES);
  ferry_tensor *masks = ferry_device_batch_sample_field(db, s, FERRY_FIELD_MASKS);
  if (!boxes || !masks) {
    fprintf(stderr, "train_loop: sample %zu has no boxes or masks\n", s);
    return FERRY_ENOTFOUND;
  }
  ferry_status st;
  int64_t n = boxes->shape[0];
  const uint8_t *m = read_back(t, stream, masks, &t->host_field, &t->host_field_bytes, &st);
  if (st != FERRY_OK) return st;
  if (n > 0) mask_coverage(m, n, (int)masks->shape[1], (int)masks->shape[2], out->cover);
  else memset(out->cover, 0, sizeof out->cover);
  const float *b = read_back(t, stream, boxes, &t->host_field, &t->host_field_bytes, &st);
  if (st != FERRY_OK) return st;
  for (int64_t i = 0; i < n; i++)
    for (int d = 0; d < NCENTRE; d++)
      *centre_loss += fit(t->weights.centre[d], out->feat, b[i * 4 + d], 1.0, g_centre[d]);
  *instances += (uint64_t)n;
  return FERRY_OK;
}

/* Every sample's image features, then the images freed: the model needs nothing else
 * of the pixels. One [B,3,H,W] tensor when the samples share a size; with a training
 * recipe (--augment rfdetr, or --multi-scale per-sample) sizes differ and each sample's
 * image is its own [3,h,w] record. */
static ferry_status batch_features(trainer *t, ferry_device_batch *db, sample_targets *samples) {
  ferry_stream *stream = ferry_device_batch_stream(db);
  size_t bsz = ferry_device_batch_size(db);
  ferry_status st = FERRY_OK;
  ferry_tensor *whole = ferry_device_batch_images(db);
  if (whole) {
    int h = (int)whole->shape[2], w = (int)whole->shape[3];
    const float *px = read_back(t, stream, whole, &t->host_images, &t->host_images_bytes, &st);
    for (size_t s = 0; st == FERRY_OK && s < bsz; s++)
      image_features(px + s * 3 * (size_t)h * w, h, w, samples[s].feat);
    ferry_tensor images;
    if (ferry_device_batch_take_images(db, &images) == FERRY_OK) ferry_tensor_free(&images);
    return st;
  }
  for (size_t s = 0; st == FERRY_OK && s < bsz; s++) {
    ferry_tensor one;
    if ((st = ferry_device_batch_take(db, s, FERRY_FIELD_IMAGES, &one)) != FERRY_OK) {
      fprintf(stderr, "train_loop: sample %zu has no image\n", s);
      return st;
    }
    const float *px = read_back(t, stream, &one, &t->host_images, &t->host_images_bytes, &st);
    if (st == FERRY_OK) image_features(px, (int)one.shape[1], (int)one.shape[2], samples[s].feat);
    ferry_tensor_free(&one);
  }
  return st;
}

/* Train on one landed batch: forward, loss, gradient, update. Frees the batch's
 * tensors one by one as it goes. *loss receives the step's loss before the update. */
static ferry_status train_step(trainer *t, ferry_device_batch *db, double loss[3]) {
  ferry_clear_error(); /* so that a failure of this step's own shows no older message */
  ferry_status st = ferry_device_batch_wait(db);
  if (st != FERRY_OK) return st;
  size_t bsz = ferry_device_batch_size(db);
  sample_targets *samples = calloc(bsz, sizeof *samples);
  if (!samples) {
    fprintf(stderr, "train_loop: out of host memory for %zu samples\n", bsz);
    return FERRY_ENOMEM;
  }
  st = batch_features(t, db, samples);

  double centre_sum = 0, g_centre[NCENTRE][NFEAT] = {{0}}, g_cover[NQUAD][NFEAT] = {{0}};
  uint64_t instances = 0;
  for (size_t s = 0; st == FERRY_OK && s < bsz; s++) {
    st = read_sample(t, db, s, &samples[s], &centre_sum, &instances, g_centre);
    free_sample(db, s);
  }
  if (st != FERRY_OK) {
    free(samples);
    return st;
  }
  /* The centre gradient was summed per instance: scale it to the instance mean. */
  double per_instance = instances ? 1.0 / (double)instances : 0.0, cover_sum = 0;
  for (size_t s = 0; s < bsz; s++)
    for (int q = 0; q < NQUAD; q++)
      cover_sum += fit(t->weights.cover[q], samples[s].feat, samples[s].cover[q],
                       1.0 / (double)bsz, g_cover[q]);
  free(samples);
  loss[1] = centre_sum * per_instance;
  loss[2] = cover_sum / (double)bsz;
  loss[0] = loss[1] + loss[2];
  for (int k = 0; k < NFEAT; k++) {
    for (int d = 0; d < NCENTRE; d++) t->weights.centre[d][k] -= t->opt->lr * g_centre[d][k] * per_instance;
    for (int q = 0; q < NQUAD; q++) t->weights.cover[q][k] -= t->opt->lr * g_cover[q][k];
  }
  return FERRY_OK;
}

/* ---- the loop ------------------------------------------------------------------- */

/* Take the loader's next batch and queue its transfer on `stream`. FERRY_EEND at the
 * end of an epoch. */
static ferry_status fetch(trainer *t, ferry_loader *loader, ferry_stream *stream,
                          inflight *out) {
  ferry_batch *batch;
  out->batch = NULL;
  ferry_status st = ferry_loader_next(loader, &batch);
  if (st != FERRY_OK) return st;
  st = ferry_loader_state_get(loader, &out->after);
  if (st == FERRY_OK) st = ferry_transfer(t->device, stream, batch, &t->transfer, &out->batch);
  ferry_batch_release(batch); /* safe at once: the arena waits for the copies */
  return st;
}

static int write_checkpoint(trainer *t, const ferry_loader_state *state, const epoch_sums *sums) {
  checkpoint c;
  memset(&c, 0, sizeof c);
  memcpy(c.magic, CHECKPOINT_MAGIC, sizeof c.magic);
  c.loader = *state;
  c.steps_done = t->steps_done;
  c.epoch = *sums;
  c.weights = t->weights;
  if (fseek(t->save_to, 0, SEEK_SET) != 0 || fwrite(&c, sizeof c, 1, t->save_to) != 1 ||
      fflush(t->save_to) != 0) {
    perror("train_loop: writing the checkpoint");
    return -1;
  }
  printf("checkpoint after step %" PRIu64 ": epoch %" PRId64 ", %" PRIu64
         " batches delivered, cursor %" PRIu64 "\n",
         c.steps_done, state->epoch, state->batches_delivered, state->cursor);
  return 0;
}

static void print_epoch(int64_t epoch, const epoch_sums *e) {
  double n = e->steps ? (double)e->steps : 1.0;
  printf("epoch %" PRId64 ": loss %.6f (centre %.6f, coverage %.6f) over %" PRIu64 " steps\n",
         epoch, e->total / n, e->centre / n, e->cover / n, e->steps);
}

/* Record a step's loss, print it if asked, and save the checkpoint if this is the step. */
static int after_step(trainer *t, const inflight *done, const double loss[3], epoch_sums *sums) {
  sums->total += loss[0];
  sums->centre += loss[1];
  sums->cover += loss[2];
  sums->steps++;
  if (t->steps_done < t->max_steps) t->losses[t->steps_done] = loss[0];
  t->steps_done++;
  if (t->opt->print_steps)
    printf("step %" PRIu64 ": loss %.9f (%a)\n", t->steps_done, loss[0], loss[0]);
  if (t->save_to && t->steps_done == t->save_after)
    return write_checkpoint(t, &done->after, sums);
  return 0;
}

/* Train until the end of epoch common.epochs - 1, starting wherever `loader` stands
 * (epoch `epoch`, with `sums` already holding that epoch's earlier steps). */
static int train(trainer *t, ferry_loader *loader, int64_t epoch, epoch_sums sums) {
  for (; epoch < t->opt->common.epochs; epoch++) {
    uint64_t k = 0;
    inflight cur, next;
    ferry_status st = fetch(t, loader, t->streams[k % 2], &next);
    while (st == FERRY_OK) {
      cur = next;
      k++;
      /* Queue the next batch's copies before computing on this one. */
      st = fetch(t, loader, t->streams[k % 2], &next);
      if (st != FERRY_OK && st != FERRY_EEND) {
        ferry_device_batch_free(cur.batch);
        break;
      }
      if (cur.after.epoch != epoch) {
        fprintf(stderr, "train_loop: the loader is in epoch %" PRId64 ", expected %" PRId64 "\n",
                cur.after.epoch, epoch);
        ferry_device_batch_free(cur.batch);
        if (st == FERRY_OK) ferry_device_batch_free(next.batch);
        return 1;
      }
      double loss[3];
      ferry_status step = train_step(t, cur.batch, loss);
      ferry_device_batch_free(cur.batch);
      if (step != FERRY_OK || after_step(t, &cur, loss, &sums) != 0) {
        if (step != FERRY_OK)
          fprintf(stderr, "train_loop: training step %" PRIu64 " failed: %s. %s\n",
                  t->steps_done + 1, ferry_strerror(step), ferry_last_error());
        if (st == FERRY_OK) ferry_device_batch_free(next.batch);
        return 1;
      }
    }
    if (st != FERRY_EEND) return fail("loading");
    print_epoch(epoch, &sums);
    memset(&sums, 0, sizeof sums);
  }
  return 0;
}

/* ---- set-up ------------------------------------------------------------------------ */

static int open_loader(const trainer *t, ferry_loader **out) {
  const options *o = t->opt;
  ferry_loader_config c;
  ferry_loader_config_default(&c);
  example_apply_common(&o->common, &c);
  c.fields = FERRY_LOADER_FIELD_BOXES | FERRY_LOADER_FIELD_MASKS;
  c.box_format = FERRY_BOXES_CXCYWH_NORM;
  c.layout = FERRY_LAYOUT_U8_HWC; /* normalised on the device by ferry_transfer */
  c.seed = 1;
  c.rank = 0;
  c.world_size = 1; /* ignore a launcher's RANK/WORLD_SIZE: this loop is one process */
  c.device = t->device;
  if (ferry_loader_open(&c, out) != FERRY_OK) return fail("opening the loader");
  return 0;
}

static int open_trainer(trainer *t, const options *o) {
  memset(t, 0, sizeof *t);
  t->opt = o;
  t->save_after = UINT64_MAX;
  t->transfer.normalize = FERRY_NORMALIZE_F32; /* ImageNet mean and std */
  if (ferry_device_open(o->common.device, &t->device) != FERRY_OK) return fail("opening the device");
  for (int i = 0; i < 2; i++)
    if (ferry_stream_open(t->device, &t->streams[i]) != FERRY_OK) return fail("opening a stream");
  return 0;
}

/* Close the streams and report whether every device byte the loop allocated was freed. */
static int close_trainer(trainer *t) {
  int leaked = 0;
  for (int i = 0; i < 2; i++)
    if (t->streams[i]) ferry_stream_close(t->streams[i]);
  if (t->device) {
    ferry_memory_stats m;
    ferry_memory_stats_init(&m);
    ferry_device_synchronize(t->device);
    if (ferry_device_memory_stats(t->device, &m) == FERRY_OK && m.live_bytes != 0) {
      fprintf(stderr, "train_loop: %" PRIu64 " device bytes still allocated\n", m.live_bytes);
      leaked = 1;
    }
    ferry_device_close(t->device);
  }
  free(t->losses);
  free(t->host_images);
  free(t->host_field);
  return leaked;
}

/* The loader's skipped samples, and the policy that skipped them, after a run. */
static void print_skipped(const trainer *t, ferry_loader *loader) {
  ferry_loader_stats stats;
  ferry_loader_stats_init(&stats);
  ferry_loader_stats_get(loader, &stats);
  printf("train_loop: %" PRIu64 " samples skipped (--on-error %s)\n", stats.samples_skipped,
         t->opt->common.on_error == FERRY_ON_ERROR_SKIP ? "skip" : "fail");
}

/* One whole run from scratch on a fresh loader. */
static int run_plain(trainer *t) {
  const example_common *o = &t->opt->common;
  ferry_loader *loader;
  if (open_loader(t, &loader) != 0) return 1;
  uint64_t nb = ferry_loader_batches_per_epoch(loader);
  printf("train_loop: %" PRIu64 " images per epoch, batch %" PRId64 ", %" PRId64 "x%" PRId64
         ", %" PRId64 " epochs on %s\n",
         ferry_loader_samples_per_epoch(loader), o->batch, o->resolution, o->resolution, o->epochs,
         ferry_device_name(t->device));
  if (o->augment != FERRY_AUGMENT_NONE)
    printf("train_loop: augment %s, multi-scale %s\n", ferry_augment_name(o->augment),
           ferry_multi_scale_name(o->multi_scale));
  t->max_steps = nb * (uint64_t)o->epochs;
  if (t->save_to) t->save_after = nb * (uint64_t)(o->epochs / 2) + (nb + 1) / 2;
  t->losses = calloc(t->max_steps ? t->max_steps : 1, sizeof *t->losses);
  int rc = t->losses ? train(t, loader, 0, (epoch_sums){0}) : 1;
  print_skipped(t, loader);
  ferry_loader_close(loader);
  return rc;
}

/* Continue from the checkpoint in `file` with a second, fresh loader, and compare
 * every later step's loss with `reference` (the uninterrupted run's). */
static int run_resumed(trainer *t, FILE *file, const double *reference, uint64_t nsteps) {
  checkpoint c;
  if (fseek(file, 0, SEEK_SET) != 0 || fread(&c, sizeof c, 1, file) != 1 ||
      memcmp(c.magic, CHECKPOINT_MAGIC, sizeof c.magic) != 0) {
    fprintf(stderr, "train_loop: the checkpoint could not be read back\n");
    return 1;
  }
  ferry_loader *loader;
  if (open_loader(t, &loader) != 0) return 1;
  if (ferry_loader_state_set(loader, &c.loader) != FERRY_OK) {
    ferry_loader_close(loader);
    return fail("restoring the loader state");
  }
  t->weights = c.weights;
  t->steps_done = c.steps_done;
  printf("resumed: a new loader from epoch %" PRId64 ", batch %" PRIu64 "\n", c.loader.epoch,
         c.loader.batches_delivered);
  int rc = train(t, loader, c.loader.epoch, c.epoch);
  print_skipped(t, loader);
  ferry_loader_close(loader);
  if (rc != 0) return rc;
  uint64_t checked = nsteps - c.steps_done;
  if (t->steps_done != nsteps ||
      memcmp(t->losses + c.steps_done, reference + c.steps_done, checked * sizeof *reference)) {
    printf("resume: MISMATCH: the resumed run's losses differ from the uninterrupted run's\n");
    return 1;
  }
  printf("resume: the %" PRIu64 " steps after the checkpoint reproduce the uninterrupted run "
         "bit for bit\n", checked);
  return 0;
}

/* Train uninterrupted, saving a checkpoint in the middle of the middle epoch; then
 * resume from it on a second loader and check the losses. */
static int resume_test(const options *o) {
  trainer t;
  FILE *file = o->checkpoint_path ? fopen(o->checkpoint_path, "w+b") : tmpfile();
  if (!file) {
    perror("train_loop: opening the checkpoint file");
    return 1;
  }
  int rc = open_trainer(&t, o);
  if (rc == 0) {
    t.save_to = file; /* run_plain picks the step: the middle of the middle epoch */
    printf("uninterrupted run:\n");
    rc = run_plain(&t);
  }
  double *reference = t.losses;
  uint64_t nsteps = t.steps_done;
  t.losses = NULL;
  rc |= close_trainer(&t);
  if (rc == 0 && nsteps >= t.save_after) {
    trainer r;
    rc = open_trainer(&r, o);
    r.max_steps = nsteps;
    r.losses = calloc(nsteps ? nsteps : 1, sizeof *r.losses);
    if (rc == 0 && r.losses) rc = run_resumed(&r, file, reference, nsteps);
    else rc = 1;
    rc |= close_trainer(&r);
  } else if (rc == 0) {
    fprintf(stderr, "train_loop: the run ended before the checkpoint step\n");
    rc = 1;
  }
  free(reference);
  fclose(file);
  return rc;
}

/* -1 to go on with *o filled, else the status to exit with (example_parse_args). */
static int parse_options(int argc, char **argv, options *o) {
  *o = (options){.common = {.device = "host", .epochs = 5, .batch = 8, .resolution = 64,
                            .on_error = FERRY_ON_ERROR_FAIL},
                 .lr = 0.05};
  example_flag flags[EXAMPLE_MAX_FLAGS];
  size_t n = example_common_flags(&o->common, flags);
  flags[n++] = (example_flag){.name = "--lr", .kind = ARG_REAL, .value = &o->lr, .meta = "X",
                              .help = "gradient descent step"};
  flags[n++] = (example_flag){.name = "--resume-test", .kind = ARG_SWITCH, .value = &o->resume_test,
                              .help = "checkpoint mid-run, resume on a new loader, compare the losses"};
  flags[n++] = (example_flag){.name = "--checkpoint", .kind = ARG_TEXT, .value = &o->checkpoint_path,
                              .meta = "FILE", .help = "where --resume-test writes its checkpoint (a temporary file)"};
  flags[n++] = (example_flag){.name = "--print-steps", .kind = ARG_SWITCH, .value = &o->print_steps,
                              .help = "print every step's loss"};
  return example_parse_args("train_loop", "A small training loop in C, fed by ferry.", flags, n, argc, argv);
}

int main(int argc, char **argv) {
  options o;
  int exit_status = parse_options(argc, argv, &o);
  if (exit_status >= 0) return exit_status;
  if (o.resume_test) return resume_test(&o);
  trainer t;
  int rc = open_trainer(&t, &o);
  if (rc == 0) rc = run_plain(&t);
  rc |= close_trainer(&t);
  return rc;
}
