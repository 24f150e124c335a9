/* loaders/loader.h - loader.c's internal call (internal; the loader's API is
 * ferry/loader.h).
 *
 * Declares the fork count that open records (loader_open.c) and that every public
 * call on an open loader compares with its own, to refuse a child's copy of a loader.
 * loader.c's other functions are the public API.
 */
#ifndef FERRY_LOADERS_LOADER_H
#define FERRY_LOADERS_LOADER_H

/* The fork() count of this process's line so far (loader.c; its pthread_atfork hook is
 * installed at the first call): open (loader_open.c) keeps it in loader->forks, and a
 * call on a loader whose count differs is in a child of fork(). */
unsigned ferry__loader_forks_so_far(void);

#endif
