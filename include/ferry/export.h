/* ferry/export.h - which symbols libferry exports.
 *
 * libferry is built with -fvisibility=hidden: a function is visible to programs that
 * link the shared library only when its declaration in a public header carries
 * FERRY_API. Everything else (the internal helpers, named ferry__*) stays inside the
 * library, so a program cannot come to depend on it by accident.
 */
#ifndef FERRY_EXPORT_H
#define FERRY_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif

#endif
