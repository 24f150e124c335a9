/* lib/transfer/producer.h - a producer of a device field from host fields (internal;
 * one of lib/'s floor headers: with lib/device_native.h, all a producer above lib/
 * includes of lib/'s insides, docs/architecture.md).
 *
 * ferry_transfer copies every host field to the device as it is: the image field
 * into the batch tensor, the others into per-sample records. A batch whose device
 * images must be made rather than copied (the GPU decoder's: compressed bytes and
 * CPU-decoded fallbacks, image/gpu/jpeg_stage.c) carries a producer, attached by
 * whoever laid the batch out (the loader). The transfer then asks the producer for
 * the device batch's images tensor, and the host fields it consumes become no
 * records. This is the one place the transfer meets image code, through a pointer:
 * lib/ links nothing above it, and a batch without a producer never leaves lib/.
 * The fields are named by the producer (its output and inputs, whatever names the
 * one who lays the batches out gave it), never by lib/.
 *
 * Contract of produce: called on the transfer's thread with the device batch made
 * (no images tensor yet), only for a batch whose bytes are in host memory (the
 * transfer refuses a producer's batch held in device memory, FERRY_EUNSUPPORTED);
 * it allocates the images tensor with ferry__device_batch_alloc_images on the device
 * batch's stream (ferry_device_batch_stream) and queues everything on that stream,
 * reading the batch only from work queued there (the transfer holds the batch until
 * that has run). On failure it leaves nothing of its own allocated (the images tensor
 * is the device batch's, freed with it). Before it allocates the images tensor it may
 * leave samples out of the device batch (ferry__device_batch_leave_out: images it
 * could not make, under the loader's skip policy); the tensor then has a row per
 * sample kept (ferry_device_batch_size), and the transfer makes records for those
 * samples only, in order.
 */
#ifndef FERRY_LIB_TRANSFER_PRODUCER_H
#define FERRY_LIB_TRANSFER_PRODUCER_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/batch.h"
#include "ferry/transfer.h"
/* what produce may do: device_batch.c's and sample_name.c's calls for producers */
#include "lib/transfer/device_batch.h"
#include "lib/transfer/sample_name.h"

#define FERRY_PRODUCER_MAX_INPUTS 4

typedef struct ferry__producer {
  const char *output;                               /* the field it stands for (a transfer's
                                                     * image_field may name it) */
  const char *inputs[FERRY_PRODUCER_MAX_INPUTS];    /* host fields it reads: no records */
  size_t ninputs;
  ferry_status (*produce)(void *self, ferry_device_batch *db, const ferry_batch *batch,
                          const ferry_transfer_options *options);
  void *self;
} ferry__producer;

/* Attach a producer to a batch (NULL detaches). Not owned: it must outlive every
 * transfer of the batch. The transfer uses it when its options name no image field,
 * or name the producer's output. */
void ferry__batch_set_producer(ferry_batch *batch, const ferry__producer *producer);

#endif
