/* loaders/progress.c - a ready-made progress callback: a bar on stderr. */
#include <stdio.h>
#include <unistd.h>

#include "ferry/loader.h"

void ferry_loader_progress_bar(const ferry_loader_progress *p, void *user) {
  (void)user;
  if (!isatty(STDERR_FILENO)) return;
  enum { WIDTH = 30 };
  uint64_t total = p->batches_per_epoch ? p->batches_per_epoch : 1;
  int done = (int)(WIDTH * (p->batches_delivered > total ? total : p->batches_delivered) / total);
  fprintf(stderr, "\r  epoch %lld [%.*s%*s] %llu/%llu batches, %llu skipped", (long long)p->epoch,
          done, "##############################", WIDTH - done, "",
          (unsigned long long)p->batches_delivered, (unsigned long long)p->batches_per_epoch,
          (unsigned long long)p->samples_skipped);
  if (p->batches_delivered >= p->batches_per_epoch) fputc('\n', stderr);
  fflush(stderr);
}
