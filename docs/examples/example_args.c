/* example_args.c - the examples' shared command line (see example_args.h).
 *
 * Invariant: a flag's value is written only when the whole argument parsed and is in
 * range, so a failed parse leaves the default in place and never a partial number.
 */
#include "example_args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t example_common_flags(example_common *c, example_flag *out) {
  const example_flag common[EXAMPLE_COMMON_FLAGS] = {
      {"--annotations", ARG_TEXT, &c->annotations, "FILE", "COCO instances JSON", 0, 0, 1},
      {"--images", ARG_TEXT, &c->images, "DIR", "folder the file names are relative to", 0, 0, 1},
      {"--device", ARG_TEXT, &c->device, "host|cuda", "where batches go (host: the CPU)", 0, 0, 0},
      {"--batch", ARG_COUNT, &c->batch, "N", "samples per batch", 1, FERRY_LOADER_MAX_BATCH, 0},
      {"--workers", ARG_COUNT, &c->workers, "N", "decoding threads (0: one per core)", 0, 1024, 0},
      {"--resolution", ARG_COUNT, &c->resolution, "R", "images and masks are R x R", 2, 8192, 0},
      {"--epochs", ARG_COUNT, &c->epochs, "N", "passes over the data", 1, 1000000, 0},
      {"--on-error", ARG_ON_ERROR, &c->on_error, "skip|fail",
       "a sample that fails to load: skip it (counted) or end the epoch", 0, 0, 0},
      {"--decode", ARG_DECODE, &c->decode, "cpu|gpu|auto",
       "where JPEGs are decoded (gpu: nvJPEG on a CUDA device; auto: gpu where it can)", 0, 0, 0},
      {"--augment", ARG_AUGMENT, &c->augment, "none|val-square|val|rfdetr-square|rfdetr",
       "each sample's geometry (rfdetr*: RF-DETR's training recipes, docs/augment.md)", 0, 0, 0},
      {"--multi-scale", ARG_MULTI_SCALE, &c->multi_scale, "off|per-sample|per-batch",
       "with a training recipe: the scale drawn per sample or per batch", 0, 0, 0},
  };
  memcpy(out, common, sizeof common);
  return EXAMPLE_COMMON_FLAGS;
}

void example_apply_common(const example_common *c, ferry_loader_config *config) {
  config->annotations = c->annotations;
  config->images = c->images;
  config->batch_size = (size_t)c->batch;
  config->workers = (size_t)c->workers;
  config->resolution = (int)c->resolution;
  config->on_error = c->on_error;
  config->image.decode = c->decode;
  config->augment.recipe = c->augment;
  config->augment.multi_scale = c->multi_scale;
}

/* The current value of a flag as the usage shows it (its default before parsing). */
static void format_value(const example_flag *f, char *buf, size_t n) {
  switch (f->kind) {
    case ARG_TEXT: {
      const char *s = *(const char *const *)f->value;
      snprintf(buf, n, "%s", s ? s : "");
      break;
    }
    case ARG_COUNT: snprintf(buf, n, "%" PRId64, *(const int64_t *)f->value); break;
    case ARG_REAL: snprintf(buf, n, "%g", *(const double *)f->value); break;
    case ARG_ON_ERROR:
      snprintf(buf, n, "%s", *(const ferry_error_policy *)f->value == FERRY_ON_ERROR_SKIP ? "skip" : "fail");
      break;
    case ARG_DECODE: snprintf(buf, n, "%s", ferry_decode_mode_name(*(const ferry_decode_mode *)f->value)); break;
    case ARG_AUGMENT: snprintf(buf, n, "%s", ferry_augment_name(*(const ferry_augment *)f->value)); break;
    case ARG_MULTI_SCALE: snprintf(buf, n, "%s", ferry_multi_scale_name(*(const ferry_multi_scale *)f->value)); break;
    case ARG_SWITCH: buf[0] = '\0'; break;
  }
}

/* The usage line; with `details`, what the program does and every flag with its default. */
static void print_usage(FILE *out, const char *program, const char *about, const example_flag *flags,
                        size_t nflags, int details) {
  fprintf(out, "usage: %s", program);
  for (size_t i = 0; i < nflags; i++) {
    const example_flag *f = &flags[i];
    const char *open = f->required ? "" : "[", *close = f->required ? "" : "]";
    if (f->kind == ARG_SWITCH) fprintf(out, " %s%s%s", open, f->name, close);
    else fprintf(out, " %s%s %s%s", open, f->name, f->meta, close);
  }
  if (!details) {
    fprintf(out, "\n(%s --help for details)\n", program);
    return;
  }
  fprintf(out, "\n%s\n\n", about);
  for (size_t i = 0; i < nflags; i++) {
    char value[64];
    format_value(&flags[i], value, sizeof value);
    fprintf(out, "  %-14s %s%s%s%s\n", flags[i].name, flags[i].help, value[0] ? " (default " : "",
            value, value[0] ? ")" : "");
  }
}

enum { WHY_MAX = 256 };

/* Strict parsers: 0 and *out set, or -1 with why (WHY_MAX bytes) naming the flag. */
static int parse_count(const example_flag *f, const char *text, int64_t *out, char *why) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (end == text || *end != '\0') {
    snprintf(why, WHY_MAX, "%s: '%s' is not a whole number", f->name, text);
    return -1;
  }
  if (errno == ERANGE || v < f->min || v > f->max) {
    snprintf(why, WHY_MAX, "%s: %s is out of range (%" PRId64 "..%" PRId64 ")", f->name, text, f->min, f->max);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_real(const example_flag *f, const char *text, double *out, char *why) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v) || v <= 0) {
    snprintf(why, WHY_MAX, "%s: '%s' is not a finite number greater than 0", f->name, text);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_on_error(const example_flag *f, const char *text, ferry_error_policy *out, char *why) {
  if (!strcmp(text, "skip")) *out = FERRY_ON_ERROR_SKIP;
  else if (!strcmp(text, "fail")) *out = FERRY_ON_ERROR_FAIL;
  else {
    snprintf(why, WHY_MAX, "%s: '%s' is neither skip nor fail", f->name, text);
    return -1;
  }
  return 0;
}

static int parse_decode(const example_flag *f, const char *text, ferry_decode_mode *out, char *why) {
  if (ferry_decode_mode_parse(text, out) == FERRY_OK) return 0;
  snprintf(why, WHY_MAX, "%s: '%s' is none of cpu, gpu, auto", f->name, text);
  return -1;
}

/* A name a ferry parser takes (ferry_augment_parse, ferry_multi_scale_parse): its
 * message names the choices, this one the flag. */
static int parse_named(const example_flag *f, const char *text, ferry_status st, char *why) {
  if (st == FERRY_OK) return 0;
  snprintf(why, WHY_MAX, "%s: %s", f->name, ferry_last_error());
  return -1;
}

static int parse_value(const example_flag *f, const char *text, char *why) {
  switch (f->kind) {
    case ARG_TEXT: *(const char **)f->value = text; return 0;
    case ARG_COUNT: return parse_count(f, text, f->value, why);
    case ARG_REAL: return parse_real(f, text, f->value, why);
    case ARG_ON_ERROR: return parse_on_error(f, text, f->value, why);
    case ARG_DECODE: return parse_decode(f, text, f->value, why);
    case ARG_AUGMENT: return parse_named(f, text, ferry_augment_parse(text, f->value), why);
    case ARG_MULTI_SCALE: return parse_named(f, text, ferry_multi_scale_parse(text, f->value), why);
    case ARG_SWITCH: break;
  }
  return -1;
}

static const example_flag *find_flag(const example_flag *flags, size_t nflags, const char *name) {
  for (size_t i = 0; i < nflags; i++)
    if (!strcmp(flags[i].name, name)) return &flags[i];
  return NULL;
}

/* Every argument in turn; 0 when all parsed, else -1 with why set. */
static int parse_all(const example_flag *flags, size_t nflags, int argc, char **argv, char *why) {
  for (int i = 1; i < argc; i++) {
    const example_flag *f = find_flag(flags, nflags, argv[i]);
    if (!f) {
      snprintf(why, WHY_MAX, "unknown argument '%s'", argv[i]);
      return -1;
    }
    if (f->kind == ARG_SWITCH) {
      *(int *)f->value = 1;
      continue;
    }
    if (i + 1 >= argc) {
      snprintf(why, WHY_MAX, "%s needs a value (%s)", f->name, f->meta);
      return -1;
    }
    if (parse_value(f, argv[++i], why) != 0) return -1;
  }
  for (size_t i = 0; i < nflags; i++)
    if (flags[i].required && !*(const char *const *)flags[i].value) {
      snprintf(why, WHY_MAX, "%s is required", flags[i].name);
      return -1;
    }
  return 0;
}

int example_parse_args(const char *program, const char *about, const example_flag *flags,
                       size_t nflags, int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      print_usage(stdout, program, about, flags, nflags, 1);
      return 0;
    }
  char why[WHY_MAX];
  if (parse_all(flags, nflags, argc, argv, why) == 0) return -1;
  fprintf(stderr, "%s: %s\n", program, why);
  print_usage(stderr, program, about, flags, nflags, 0);
  return 2;
}
