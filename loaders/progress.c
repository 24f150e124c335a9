/* loaders/progress.c - a ready-made progress callback: a bar on stderr.
 *
 * ferry_loader_next calls the config's progress callback on the consumer's thread,
 * after it has let go of the loader's lock, once per batch it hands out. This one
 * redraws a 30-column bar on one terminal line ('\r'), and ends the line when the
 * epoch's nominal batch count is reached.
 * Owns nothing and keeps no state between calls: all it prints is in *p.
 * Not done here: nothing is printed when stderr is not a terminal, so logs and CI
 * output stay clean; no rate or time estimate. An epoch that skipped samples can end
 * a batch short of batches_per_epoch (a count taken before any skip); its line is then
 * not ended, and the next epoch's first bar overwrites it.
 */
#include <stdio.h>
#include <unistd.h>

#include "ferry/loader.h"

void ferry_loader_progress_bar(const ferry_loader_progress *p, void *user) {
  (void)user;
  if (!isatty(STDERR_FILENO)) return;
  enum { WIDTH = 30 };
  /* 0 batches per epoch (drop_last with fewer samples than a batch): no division by
   * 0. The count is clamped so that %.*s never asks for more than the 30 '#'s. */
  uint64_t total = p->batches_per_epoch ? p->batches_per_epoch : 1;
  int done = (int)(WIDTH * (p->batches_delivered > total ? total : p->batches_delivered) / total);
  fprintf(stderr, "\r  epoch %lld [%.*s%*s] %llu/%llu batches, %llu skipped", (long long)p->epoch,
          done, "##############################", WIDTH - done, "",
          (unsigned long long)p->batches_delivered, (unsigned long long)p->batches_per_epoch,
          (unsigned long long)p->samples_skipped);
  /* The line ends with the epoch, not at the nominal count: skipped samples can end
   * it short of batches_per_epoch. */
  if (p->epoch_ended) fputc('\n', stderr);
  fflush(stderr);
}
