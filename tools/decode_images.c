/* tools/decode_images.c - `ferry-coco validate --decode`: a full decode of every image.
 *
 * A header can be intact over a file cut in half; only decoding every byte shows that
 * the loader will not stop on the file mid-epoch. The images are shared out through an
 * atomic counter, so each is decoded exactly once whatever the thread count; each
 * thread owns its decoder; results[i] is written only by the thread that took image i,
 * and read only after every thread is joined, so no lock is needed. The caller prints
 * the results in image order: the report does not depend on the thread count.
 */
#include "decode_images.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/image.h"

typedef struct decode_job {
  const ferry_coco *coco;
  const char *dir;
  decoded_image *results;
  atomic_size_t next;
} decode_job;

static char *copy_of(const char *s) {
  char *copy = malloc(strlen(s) + 1);
  return copy ? strcpy(copy, s) : NULL;
}

static void decode_one(decode_job *job, ferry_decoder *d, size_t i) {
  decoded_image *r = &job->results[i];
  ferry_coco_image img;
  ferry_coco_image_at(job->coco, i, &img);
  size_t n = strlen(job->dir) + strlen(img.file_name) + 2;
  char *path = malloc(n);
  if (!path) {
    r->error = copy_of("out of memory");
    return;
  }
  snprintf(path, n, "%s/%s", job->dir, img.file_name);
  const uint8_t *pixels;
  if (ferry_image_load_rgb(d, path, NULL, &pixels, &r->width, &r->height) != FERRY_OK)
    r->error = copy_of(ferry_last_error());
  free(path);
}

static void *decode_worker(void *arg) {
  decode_job *job = arg;
  ferry_decoder *d = NULL;
  int opened = ferry_decoder_open(&d) == FERRY_OK;
  size_t n = ferry_coco_num_images(job->coco);
  for (size_t i; (i = atomic_fetch_add(&job->next, 1)) < n;) {
    if (opened) decode_one(job, d, i);
    else job->results[i].error = copy_of("could not open a decoder (out of memory)");
  }
  ferry_decoder_close(d);
  return NULL;
}

int decode_images(const ferry_coco *coco, const char *dir, size_t threads, decoded_image *results) {
  decode_job job = {.coco = coco, .dir = dir, .results = results};
  atomic_init(&job.next, 0);
  memset(results, 0, ferry_coco_num_images(coco) * sizeof *results);
  if (threads < 1) threads = 1;
  pthread_t *ids = calloc(threads, sizeof *ids);
  if (!ids) {
    fprintf(stderr, "ferry-coco: out of memory for %zu threads\n", threads);
    return -1;
  }
  size_t started = 0;
  while (started < threads && pthread_create(&ids[started], NULL, decode_worker, &job) == 0) started++;
  if (started == 0) decode_worker(&job); /* no thread at all: decode here */
  for (size_t t = 0; t < started; t++) pthread_join(ids[t], NULL);
  free(ids);
  return 0;
}

void decoded_images_free(decoded_image *results, size_t n) {
  for (size_t i = 0; i < n; i++) free(results[i].error);
}
