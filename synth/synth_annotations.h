/* synth/synth_annotations.h - synth_coco --annotations-only: a train2017-sized
 * instances file (no images), written as a stream. */
#ifndef FERRY_SYNTH_ANNOTATIONS_H
#define FERRY_SYNTH_ANNOTATIONS_H

#include <stdint.h>

/* Write DIR/annotations/instances_train2017.json: `images` images and `instances`
 * polygon annotations spread over them in image order. Returns 0, or -1 with a
 * message printed. */
int synth_annotations_only(const char *dir, uint64_t images, uint64_t instances, uint64_t seed);

#endif
