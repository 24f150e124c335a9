/* coco/sidecars.h - a split's annotations built from per-sample JSON sidecars (the
 * "json" members of WebDataset shards), one sample at a time (internal; used by
 * loaders/shard_open.c, which walks the shards with source/ and hands each sidecar
 * here).
 *
 * Knows no file, URL or tar: it is given each sample's sidecar bytes (or told that
 * the sample has a problem), its member name and its image's probed size, in dataset
 * order, and builds the same ferry_coco the split's JSON would give: images in that
 * order, their annotations in sidecar order, labels per the policy it is finished
 * with. Two passes, so that no tree of every annotation is built (it costs several
 * times the text, as coco/json_stream.c says of a JSON): the first reads each sidecar
 * for its image's entry (id, file name) and checks it, keeping only how many
 * annotations it has; finishing parses the head (categories, images) and asks for each
 * sidecar's bytes again, adding its annotations one by one (ferry__coco_open_stepwise).
 * A sidecar is an object with an integer "image_id", a string "file_name" (else the
 * member's name) and an array "annotations", each of which has that image_id or none
 * (it is given it). A sample with a problem stays an image without annotations, of
 * size 1 x 1, with an id after every real one. Messages name the shard and member
 * given; parse.c's messages about "images[i]" or "annotations[i]" get the sample's.
 */
#ifndef FERRY_COCO_SIDECARS_H
#define FERRY_COCO_SIDECARS_H

#include <jansson.h>
#include <stddef.h>

#include "ferry/coco.h"

typedef struct ferry__sidecars ferry__sidecars;

/* A builder for the split `spec` (named in its messages); installs ferry's allocator in
 * jansson (coco/json_load.h). */
ferry_status ferry__sidecars_new(const char *spec, ferry__sidecars **out);
void ferry__sidecars_free(ferry__sidecars *b);

/* The next sample's sidecar, `len` bytes NUL-terminated at bytes[len], named `member` of
 * `shard`: checked, its image id and file name kept for its entry, its category ids
 * noted. An error is the sample's (FERRY_ENOMEM apart). */
ferry_status ferry__sidecars_read(ferry__sidecars *b, const char *shard, const char *member, const char *bytes,
                                  size_t len);
/* The next sample's entry: its image member's name (its file name when its sidecar gave
 * none or was not read), whether it has a problem (then no annotations), and its size.
 * After ferry__sidecars_read of it, or without (a problem before its sidecar). */
ferry_status ferry__sidecars_add(ferry__sidecars *b, const char *member, int problem, int width, int height);

/* How the built coco labels: an index's categories and policy (from_index: categories
 * as given, NULL for none; raw: category ids, else RF-DETR's rule over `annotated`),
 * or without an index the options' remap_categories over one category per id seen
 * (sorted, unnamed: sidecars carry no names). */
typedef struct ferry__sidecar_labels {
  int from_index;
  int raw;
  const json_t *categories;
  const json_t *annotated;
} ferry__sidecar_labels;

/* Sample `sample`'s sidecar bytes again (NUL-terminated, valid until the next call),
 * and names for messages: its shard and the label of the member read. */
typedef ferry_status (*ferry__sidecar_reread_fn)(void *user, size_t sample, const char **bytes, size_t *len,
                                                 const char **shard, const char **label);
/* Sample `sample`'s shard and image member, for messages. */
typedef void (*ferry__sidecar_name_fn)(void *user, size_t sample, const char **shard, const char **member);

/* The coco: the entries added, labelled as `labels` says, `opts` (may be NULL) for the
 * rest; the annotations read again through `reread`. */
ferry_status ferry__sidecars_finish(ferry__sidecars *b, const ferry__sidecar_labels *labels,
                                    const ferry_coco_options *opts, ferry__sidecar_reread_fn reread,
                                    ferry__sidecar_name_fn name, void *user, ferry_coco **out);

#endif
