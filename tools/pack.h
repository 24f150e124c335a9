/* tools/pack.h - `ferry-coco pack` (tools/pack.c), called by tools/ferry_coco.c. */
#ifndef FERRY_TOOLS_PACK_H
#define FERRY_TOOLS_PACK_H

/* argv after "pack": ANNOTATIONS --images DIR --out DIR [--split NAME] [--max-shard-bytes N]
 * [--category-ids remap|raw]. 0 done, 1 failed (said why on stderr), -1 a usage error. */
int ferry_coco_pack(int argc, char **argv);

#endif
