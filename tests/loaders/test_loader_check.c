/* tests/loaders/test_loader_check.c - ferry__loader_check (loaders/loader_check.c)
 * finds each kind of broken invariant, names it, and passes a loader left alone;
 * invariant_abort (below, run by check_invariant_abort.py) proves that the checking
 * builds abort at the release of the lock that lets a broken state out. */
#include <signal.h>

#include "ferry_config.h"
#include "loader_fixture.h"
#include "loaders/loader_internal.h"
#include "loaders/handoff.h"
#include "loaders/loader_check.h"

static ferry_loader *loader_mid_epoch(ferry_batch **held) {
  ferry_loader_config c;
  test_config(&c);
  ferry_loader *l = open_loader(&c);
  cr_assert_eq(ferry_loader_next(l, held), FERRY_OK, "%s", ferry_last_error());
  return l;
}

/* Breaks one field by `delta`, expects the report to name `what`, puts it back. */
static void expect_caught(ferry_loader *l, size_t *field, size_t delta, const char *what) {
  char why[256];
  *field += delta;
  ferry_status st = ferry__loader_check_report(l, why, sizeof why);
  *field -= delta;
  cr_expect_eq(st, FERRY_EINVAL, "breaking %s went unnoticed", what);
  cr_expect_neq(strstr(why, what), NULL, "breaking %s: the report says '%s'", what, why);
}

Test(loader_check, a_loader_left_alone_passes_and_each_broken_count_is_named, .timeout = 60) {
  ferry_batch *b;
  ferry_loader *l = loader_mid_epoch(&b);
  char why[256];
  for (int round = 0; round < 20; round++) {
    pthread_mutex_lock(&l->lock);
    cr_assert_eq(ferry__loader_check_report(l, why, sizeof why), FERRY_OK, "%s", why);
    expect_caught(l, &l->hand.ready, 1, "ready is");
    expect_caught(l, &l->hand.inflight, 1, "inflight is");
    expect_caught(l, &l->hand.outstanding, 1, "outstanding is");
    expect_caught(l, &l->hand.nheld, 1, "held");
    expect_caught(l, &l->work.unclaimed, 1, "unclaimed is");
    expect_caught(l, &l->work.busy, l->work.max_busy + 1, "busy");
    ferry__loader_unlock(l);
    ferry_batch_release(b);
    ferry_status st = ferry_loader_next(l, &b);
    if (st == FERRY_EEND) st = ferry_loader_next(l, &b);
    cr_assert_eq(st, FERRY_OK, "%s", ferry_last_error());
  }
  ferry_batch_release(b);
  ferry_loader_close(l);
}

/* A plan's own counts, and the order of the plans in flight. */
Test(loader_check, a_plan_out_of_order_or_miscounted_is_named, .timeout = 60) {
  ferry_loader_config c;
  test_config(&c);
  c.max_outstanding = 1;
  ferry_loader *l = open_loader(&c);
  char why[256];
  /* Wait until two plans are in flight behind a batch the consumer has not taken. */
  for (int tries = 0; tries < 2000; tries++) {
    pthread_mutex_lock(&l->lock);
    ferry__plan *p = l->hand.inflight_head;
    if (p && p->next) {
      uint64_t end = p->end;
      p->end += 1;
      cr_expect_eq(ferry__loader_check_report(l, why, sizeof why), FERRY_EINVAL);
      cr_expect_neq(strstr(why, "not contiguous"), NULL, "%s", why);
      p->end = end;
      size_t pending = p->pending;
      p->pending = p->count + 1;
      cr_expect_eq(ferry__loader_check_report(l, why, sizeof why), FERRY_EINVAL);
      cr_expect_neq(strstr(why, "pending"), NULL, "%s", why);
      p->pending = pending;
      cr_expect_eq(ferry__loader_check_report(l, why, sizeof why), FERRY_OK, "%s", why);
      ferry__loader_unlock(l);
      ferry_loader_close(l);
      return;
    }
    ferry__loader_unlock(l);
    usleep(1000);
  }
  ferry_loader_close(l);
  cr_skip_test("never saw two plans in flight");
}
