/* lib/thread.h - starting ferry's threads under their names (internal).
 *
 * Every thread ferry starts carries a name (ferry-worker-3, ferry-coord,
 * ferry-stream), so that top -H, gdb, perf and /proc/PID/task show whose time is
 * whose. Linux keeps 15 characters of a name; longer names are cut, never refused.
 */
#ifndef FERRY_LIB_THREAD_H
#define FERRY_LIB_THREAD_H

#include <pthread.h>
#include <stddef.h>

/* pthread_create(out, NULL, fn, arg), then name the new thread `prefix` followed by
 * `index` (no number when index is SIZE_MAX; when that is too long, the number is
 * kept and the prefix is cut). Returns pthread_create's result. The name is set
 * before this returns, so from then on nobody sees the thread under its creator's
 * name (a new thread inherits it until renamed). */
int ferry__thread_start(pthread_t *out, void *(*fn)(void *), void *arg, const char *prefix, size_t index);

#endif
