/* example_args.h - the command line the example programs share (demo, train_loop).
 *
 * A program lists its flags in a table (example_common_flags adds the ones every
 * example takes) and example_parse_args reads argv against it. Numbers are parsed
 * strictly: the whole argument must be a number within the flag's range, else the
 * error names the flag and the value ("--batch: 'abc' is not a whole number").
 * --help prints the usage with every default on stdout and exits 0; a bad command line
 * prints the error and the usage on stderr and exits 2.
 */
#ifndef FERRY_EXAMPLE_ARGS_H
#define FERRY_EXAMPLE_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/loader.h"

typedef enum example_arg_kind {
  ARG_TEXT,     /* const char **; any string */
  ARG_COUNT,    /* int64_t *; a whole number in min..max */
  ARG_REAL,     /* double *; a finite number greater than 0 */
  ARG_SWITCH,   /* int *; takes no value, sets 1 */
  ARG_ON_ERROR, /* ferry_error_policy *; "skip" or "fail" */
  ARG_DECODE,   /* ferry_decode_mode *; "cpu", "gpu" or "auto" */
  ARG_AUGMENT,  /* ferry_augment *; "none", "val-square", "val", "rfdetr-square", "rfdetr" */
  ARG_MULTI_SCALE, /* ferry_multi_scale *; "off", "per-sample", "per-batch" */
} example_arg_kind;

typedef struct example_flag {
  const char *name; /* "--batch" */
  example_arg_kind kind;
  void *value;      /* holds the default before parsing */
  const char *meta; /* what the value is, in the usage: "N", "FILE" */
  const char *help;
  int64_t min, max; /* ARG_COUNT's range */
  int required;     /* must be given (ARG_TEXT) */
} example_flag;

/* What every example takes; the caller sets the defaults before parsing. */
typedef struct example_common {
  const char *annotations, *images, *device;
  int64_t batch, workers, resolution, epochs;
  ferry_error_policy on_error;
  ferry_decode_mode decode;
  ferry_augment augment;
  ferry_multi_scale multi_scale;
} example_common;

enum { EXAMPLE_COMMON_FLAGS = 11, EXAMPLE_MAX_FLAGS = 26 };

/* Write the EXAMPLE_COMMON_FLAGS flags bound to `c` into `out`; returns their number. */
size_t example_common_flags(example_common *c, example_flag *out);

/* Parse argv. Returns -1 when the program should go on, else the status to exit with:
 * 0 after --help (or -h), 2 after a bad command line (the message names the flag). */
int example_parse_args(const char *program, const char *about, const example_flag *flags,
                       size_t nflags, int argc, char **argv);

/* Copy the common options into a loader configuration. */
void example_apply_common(const example_common *c, ferry_loader_config *config);

#endif
