/* lib/thread.h - naming ferry's threads (internal).
 *
 * Every thread ferry starts names itself (ferry-worker-3, ferry-coord,
 * ferry-stream), so that top -H, gdb, perf and /proc/PID/task show whose time is
 * whose. Linux keeps 15 characters of a name; longer names are cut, never refused.
 */
#ifndef FERRY_LIB_THREAD_H
#define FERRY_LIB_THREAD_H

#include <stddef.h>

/* Name the calling thread `prefix` followed by `index` (no number when index is
 * SIZE_MAX). When that is too long, the number is kept and the prefix is cut. */
void ferry__thread_name(const char *prefix, size_t index);

#endif
