/* coco/index_read.c - opening a binary COCO index (format: coco/index_format.h).
 *
 * Opening takes the file's bytes so that nothing done to the file later reaches them,
 * and points a ferry_coco's arrays into them. A file nobody can write in place (no
 * write bit, owned by this user or root, opened by a process that is not root) is
 * mapped read-only and shared: processes on one machine share its pages. Any other is
 * read into private memory: `cp new.ferryidx X.ferryidx` truncates and rewrites the
 * inode a run reads, which under a shared mapping is SIGBUS or a checked slice changed
 * after its check. Before any of it is used, the header is checked (magic, version,
 * record sizes, file size, its checksum) and so is every offset and count in it and in
 * the records: a section must lie inside the file, and every slice a record names must
 * lie inside its target section. After that, no read through the object can leave the
 * bytes, whatever the file holds or later becomes. The checksums of the sections whose
 * every byte this check reads anyway are verified at open; the bulk payload (vertices,
 * RLE counts, keypoints, strings) is verified by ferry_coco_index_verify (`ferry-coco
 * validate`), or at open when FERRY_COCO_INDEX_VERIFY=1.
 * Callers: index_cache.c (ferry_coco_open) and coco.c (a buffer holding an index), on
 * the opening thread. The result is read-only like any opened coco; closing it unmaps
 * or frees the bytes (store.c). Not done here: deciding whether an index is fresh
 * (index_cache.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coco/categories.h"
#include "coco/hash64.h"
#include "coco/index_format.h"
#include "coco/index_read.h"
#include "coco/store.h"
#include "lib/alloc.h"
#include "lib/status.h"

#define MAX_IMAGE_SIDE INT32_MAX

/* Fuzzing builds (tests/fuzz) accept damaged checksums, so that mutated inputs reach
 * the structural checks, which alone keep every read inside the bytes. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define CHECKSUMS_ENFORCED 0
#else
#define CHECKSUMS_ENFORCED 1
#endif

int ferry__coco_index_sniff(const void *data, size_t len) {
  return data && len >= FERRY_INDEX_MAGIC_LEN && memcmp(data, FERRY_INDEX_MAGIC, FERRY_INDEX_MAGIC_LEN) == 0;
}

ferry_status ferry__coco_index_file_sniff(const char *path, int *is_index) {
  *is_index = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return ferry__fail(FERRY_EIO, "%s: cannot open: %s", path, strerror(errno));
  char magic[FERRY_INDEX_MAGIC_LEN];
  size_t got = fread(magic, 1, sizeof magic, f);
  fclose(f);
  *is_index = ferry__coco_index_sniff(magic, got);
  return FERRY_OK;
}

static ferry_status bad_index(const char *name, const char *what) {
  return ferry__fail(FERRY_EFORMAT, "%s: not a valid ferry index: %s", name, what);
}

/* [first, first + count) inside [0, n), written so that first + count cannot wrap. */
static int range_ok(uint64_t first, uint64_t count, uint64_t n) { return first <= n && count <= n - first; }

/* ---- header ----------------------------------------------------------------------- */

static ferry_status check_header(const char *name, const unsigned char *base, size_t len, ferry__index_header *h) {
  if (len < sizeof *h) return ferry__fail(FERRY_EFORMAT, "%s: not a valid ferry index: truncated (%zu bytes, the header alone is %zu)", name, len, sizeof *h);
  memcpy(h, base, sizeof *h);
  if (memcmp(h->magic, FERRY_INDEX_MAGIC, FERRY_INDEX_MAGIC_LEN) != 0) return bad_index(name, "wrong magic");
  if (h->version != FERRY_INDEX_VERSION)
    return ferry__fail(FERRY_EFORMAT, "%s: ferry index version %u, this ferry reads version %u (rebuild it with `ferry-coco index`)",
                      name, h->version, FERRY_INDEX_VERSION);
  if (h->header_size != sizeof *h || h->num_sections != SEC_COUNT) return bad_index(name, "header size or section count differs from version 1's");
  if (CHECKSUMS_ENFORCED && h->checksum != ferry__hash64(h, offsetof(ferry__index_header, checksum), 0))
    return bad_index(name, "header checksum mismatch");
  /* After the checksum: with the header intact, a size mismatch means the file was cut
   * or appended to, and the message can say so. */
  if (h->file_size != len)
    return ferry__fail(FERRY_EFORMAT, "%s: not a valid ferry index: %zu bytes, the header says %llu (truncated or extended)",
                      name, len, (unsigned long long)h->file_size);
  if (h->flags & ~FERRY_INDEX_FLAGS) return bad_index(name, "unknown flags");
  return FERRY_OK;
}

static ferry_status check_sections(const char *name, const ferry__index_header *h, size_t len) {
  for (unsigned id = 0; id < SEC_COUNT; id++) {
    const ferry__index_section *s = &h->sections[id];
    if (s->id != id || s->elem_size != ferry__index_elem_size(id))
      return ferry__fail(FERRY_EFORMAT, "%s: not a valid ferry index: section %u has id %u and %u-byte elements", name, id, s->id, s->elem_size);
    /* The count is compared by division: count * elem_size could wrap. */
    if (s->offset % FERRY_INDEX_ALIGN || s->offset < sizeof *h || s->offset > len ||
        s->count > (len - s->offset) / s->elem_size)
      return ferry__fail(FERRY_EFORMAT, "%s: not a valid ferry index: section %u (%llu elements at offset %llu) is misaligned or lies outside the %zu-byte file",
                        name, id, (unsigned long long)s->count, (unsigned long long)s->offset, len);
  }
  return FERRY_OK;
}

/* ---- records --------------------------------------------------------------------------- */

static void attach(ferry__coco_vec *v, const unsigned char *base, const ferry__index_section *s) {
  v->data = (void *)(base + s->offset);
  v->n = v->cap = s->count;
  v->elem = s->elem_size;
}

static ferry_status bad_record(const ferry_coco *coco, const char *what, size_t i, const char *problem) {
  return ferry__fail(FERRY_EFORMAT, "%s: not a valid ferry index: %s %zu: %s", coco->name, what, i, problem);
}

/* Enough because check_strings makes the pool end with a NUL: any offset inside it
 * reads a terminated string without leaving the section. */
static int string_ok(const ferry_coco *coco, uint64_t offset) { return offset < coco->strings.n; }

static ferry_status check_strings(const ferry_coco *coco) {
  const char *pool = coco->strings.data;
  if (coco->strings.n == 0 || pool[0] != '\0' || pool[coco->strings.n - 1] != '\0')
    return ferry__fail(FERRY_EFORMAT, "%s: not a valid ferry index: the string pool must start and end with a NUL", coco->name);
  return FERRY_OK;
}

/* Images with their annotation slices: back to back over image_anns, in order, as
 * parse.c's counting sort lays them (so no two slices overlap; check_records checks
 * that each entry is an annotation of its image, not that none is repeated). */
static ferry_status check_images(const ferry_coco *coco, size_t image_anns) {
  size_t next = 0;
  for (size_t i = 0; i < coco->images.n; i++) {
    const ferry__coco_image *img = &COCO_AT(coco->images, ferry__coco_image, i);
    if (!string_ok(coco, img->file_name)) return bad_record(coco, "image", i, "file name outside the string pool");
    if (img->width < 0 || img->height < 0 || img->width > MAX_IMAGE_SIDE || img->height > MAX_IMAGE_SIDE)
      return bad_record(coco, "image", i, "invalid size");
    if (img->first_ann != next || !range_ok(img->first_ann, img->num_anns, image_anns))
      return bad_record(coco, "image", i, "annotation range out of bounds or out of order");
    next += img->num_anns;
  }
  if (next != image_anns) return bad_index(coco->name, "the images do not cover the per-image annotation table");
  return FERRY_OK;
}

/* Categories, and K: the longest keypoint list among them, as parse.c computes it. */
static ferry_status check_categories(const ferry_coco *coco) {
  size_t longest = 0;
  for (size_t i = 0; i < coco->categories.n; i++) {
    const ferry__coco_category *cat = &COCO_AT(coco->categories, ferry__coco_category, i);
    if (!string_ok(coco, cat->name) || !string_ok(coco, cat->supercategory))
      return bad_record(coco, "category", i, "name or supercategory outside the string pool");
    if (cat->num_keypoints > longest) longest = cat->num_keypoints;
  }
  if (coco->num_keypoints != longest || longest > FERRY_INDEX_MAX_KEYPOINTS)
    return ferry__fail(FERRY_EFORMAT, "%s: not a valid ferry index: K = %zu keypoints, the categories name %zu (at most %u)",
                      coco->name, coco->num_keypoints, longest, FERRY_INDEX_MAX_KEYPOINTS);
  return FERRY_OK;
}

/* An id table: sorted, each entry the id of the element it names, every element once. */
static ferry_status check_id_table(const ferry_coco *coco, const ferry__coco_id_entry *t, const ferry__coco_vec *elems,
                                   const char *what) {
  size_t n = elems->n;
  unsigned char *seen = ferry__calloc(n ? n : 1, 1);
  if (!seen) return ferry__fail(FERRY_ENOMEM, "%s: out of memory checking the index", coco->name);
  ferry_status st = FERRY_OK;
  for (size_t i = 0; i < n && st == FERRY_OK; i++) {
    int64_t id;
    if (t[i].index >= n || seen[t[i].index]++) st = bad_record(coco, what, i, "position out of range or repeated");
    else if (memcpy(&id, (const char *)elems->data + t[i].index * elems->elem, sizeof id), id != t[i].id)
      st = bad_record(coco, what, i, "id differs from its element's");
    else if (i && t[i].id <= t[i - 1].id) st = bad_record(coco, what, i, "ids not sorted or repeated");
  }
  ferry__free(seen);
  return st;
}

static ferry_status check_parts(const ferry_coco *coco) {
  for (size_t i = 0; i < coco->parts.n; i++) {
    const ferry__coco_part *part = &COCO_AT(coco->parts, ferry__coco_part, i);
    if (part->k > SIZE_MAX / 2 || !range_ok(part->first, part->k * 2, coco->coords.n))
      return bad_record(coco, "polygon part", i, "vertices out of bounds");
  }
  return FERRY_OK;
}

static ferry_status check_segmentation(const ferry_coco *coco, const ferry__coco_ann *a, size_t i) {
  switch (a->pub.segm) {
    case FERRY_SEGM_NONE:
      return FERRY_OK;
    case FERRY_SEGM_POLYGONS:
      /* A result list's polygons have no image to take a size from, as in its JSON:
       * they open, and making their mask fails (segm.c), as from the JSON. */
      if (a->pub.image_index == SIZE_MAX && !coco->result_list)
        return bad_record(coco, "annotation", i, "polygons without an image");
      return range_ok(a->seg_first, a->pub.num_polygons, coco->parts.n)
                 ? FERRY_OK : bad_record(coco, "annotation", i, "polygon parts out of bounds");
    case FERRY_SEGM_RLE:
      return range_ok(a->rle_string, a->seg_len, coco->strings.n)
                 ? FERRY_OK : bad_record(coco, "annotation", i, "RLE string out of bounds");
    case FERRY_SEGM_RLE_COUNTS:
      return range_ok(a->seg_first, a->seg_len, coco->counts.n)
                 ? FERRY_OK : bad_record(coco, "annotation", i, "RLE counts out of bounds");
  }
  return bad_record(coco, "annotation", i, "unknown segmentation kind");
}

static ferry_status check_annotation(const ferry_coco *coco, const ferry__coco_ann *a, size_t i) {
  const ferry_coco_annotation *p = &a->pub;
  if (p->image_index != SIZE_MAX ? p->image_index >= coco->images.n : !coco->result_list)
    return bad_record(coco, "annotation", i, "image out of range");
  if ((p->iscrowd != 0 && p->iscrowd != 1) || (p->has_id != 0 && p->has_id != 1) || (p->has_bbox != 0 && p->has_bbox != 1))
    return bad_record(coco, "annotation", i, "a flag is neither 0 nor 1");
  if (coco->categories.n && ferry__coco_id_lookup(coco->category_ids, coco->categories.n, p->category_id) == SIZE_MAX)
    return bad_record(coco, "annotation", i, "no such category");
  if ((uint64_t)a->seg_h * a->seg_w > UINT32_MAX) return bad_record(coco, "annotation", i, "RLE size over 2^32-1 pixels");
  if ((coco->num_keypoints && p->num_keypoints > coco->num_keypoints) || p->num_keypoints > SIZE_MAX / 3 ||
      !range_ok(a->kp_first, p->num_keypoints * 3, coco->keypoints.n))
    return bad_record(coco, "annotation", i, "keypoints out of bounds");
  return check_segmentation(coco, a, i);
}

/* In dependency order: the id tables are checked before the annotations, whose
 * category is looked up in them by binary search. */
static ferry_status check_records(const ferry_coco *coco, size_t image_anns) {
  ferry_status st;
  if ((st = check_strings(coco)) < 0 || (st = check_images(coco, image_anns)) < 0 ||
      (st = check_categories(coco)) < 0 || (st = check_parts(coco)) < 0 ||
      (st = check_id_table(coco, coco->image_ids, &coco->images, "image id entry")) < 0 ||
      (st = check_id_table(coco, coco->category_ids, &coco->categories, "category id entry")) < 0)
    return st;
  /* Each image lists its own annotations in file order (parse.c lays them out so),
   * so each annotation is listed once at most: under its image, and not twice there. */
  for (size_t img = 0; img < coco->images.n; img++) {
    const ferry__coco_image *im = &COCO_AT(coco->images, ferry__coco_image, img);
    for (size_t k = im->first_ann; k < im->first_ann + im->num_anns; k++) {
      size_t a = coco->image_anns[k];
      if (a >= coco->anns.n || COCO_AT(coco->anns, ferry__coco_ann, a).pub.image_index != img)
        return bad_record(coco, "per-image annotation entry", k, "out of range or of another image");
      if (k > im->first_ann && a <= coco->image_anns[k - 1])
        return bad_record(coco, "per-image annotation entry", k, "listed twice or out of file order");
    }
  }
  for (size_t i = 0; i < coco->anns.n; i++)
    if ((st = check_annotation(coco, &COCO_AT(coco->anns, ferry__coco_ann, i), i)) < 0) return st;
  if (coco->opts.remap_categories && coco->categories.n == 0 && coco->any_category_id)
    return ferry__fail(FERRY_EFORMAT, "%s: cannot remap category ids: the file has no categories", coco->name);
  return FERRY_OK;
}

/* ---- checksums ------------------------------------------------------------------------- */

/* Sections whose every byte check_records reads: checksummed at open. */
static int checked_at_open(unsigned id) {
  return id != SEC_COORDS && id != SEC_COUNTS && id != SEC_KEYPOINTS && id != SEC_STRINGS;
}

static ferry_status verify_sections(const char *name, const unsigned char *base, const ferry__index_header *h,
                                    int all) {
  for (unsigned id = 0; id < SEC_COUNT; id++) {
    const ferry__index_section *s = &h->sections[id];
    if ((!all && !checked_at_open(id)) || !CHECKSUMS_ENFORCED) continue;
    if (ferry__hash64(base + s->offset, s->count * s->elem_size, 0) != s->checksum)
      return ferry__fail(FERRY_EFORMAT, "%s: not a valid ferry index: section %u checksum mismatch (the file is damaged)", name, id);
  }
  return FERRY_OK;
}

static int verify_all_at_open(void) {
  const char *v = getenv("FERRY_COCO_INDEX_VERIFY");
  return v && v[0] == '1';
}

/* ---- open ------------------------------------------------------------------------------ */

/* Check the bytes and hand them to a new coco, which owns them from then on. */
static ferry_status adopt(void *bytes, size_t len, int mapped, const char *name, const ferry_coco_options *opts,
                          ferry_coco **out) {
  ferry__index_header h;
  const unsigned char *base = bytes;
  ferry_status st = check_header(name, base, len, &h);
  if (st == FERRY_OK) st = check_sections(name, &h, len);
  if (st == FERRY_OK) st = verify_sections(name, base, &h, verify_all_at_open());
  ferry_coco *coco = NULL;
  if (st == FERRY_OK) st = ferry__coco_new(name, opts, &coco);
  if (st < 0) {
    if (mapped) munmap(bytes, len);
    else ferry__free(bytes);
    return st;
  }
  coco->backing = bytes;
  coco->backing_len = len;
  coco->backing_mapped = mapped;
  coco->result_list = (h.flags & FERRY_INDEX_FLAG_RESULT_LIST) != 0;
  coco->any_category_id = (h.flags & FERRY_INDEX_FLAG_CATEGORY_IDS) != 0;
  coco->num_keypoints = h.num_keypoints;
  const ferry__index_section *s = h.sections;
  attach(&coco->images, base, &s[SEC_IMAGES]);
  attach(&coco->categories, base, &s[SEC_CATEGORIES]);
  attach(&coco->anns, base, &s[SEC_ANNS]);
  attach(&coco->parts, base, &s[SEC_PARTS]);
  attach(&coco->coords, base, &s[SEC_COORDS]);
  attach(&coco->counts, base, &s[SEC_COUNTS]);
  attach(&coco->keypoints, base, &s[SEC_KEYPOINTS]);
  attach(&coco->strings, base, &s[SEC_STRINGS]);
  coco->image_ids = (ferry__coco_id_entry *)(base + s[SEC_IMAGE_IDS].offset);
  coco->category_ids = (ferry__coco_id_entry *)(base + s[SEC_CATEGORY_IDS].offset);
  coco->image_anns = (size_t *)(base + s[SEC_IMAGE_ANNS].offset);
  if (s[SEC_IMAGE_IDS].count != coco->images.n || s[SEC_CATEGORY_IDS].count != coco->categories.n ||
      s[SEC_IMAGE_ANNS].count > coco->anns.n)
    st = bad_index(name, "id tables do not match the images and categories");
  if (st == FERRY_OK) st = check_records(coco, s[SEC_IMAGE_ANNS].count);
  if (st == FERRY_OK) st = ferry__coco_assign_labels(coco);
  if (st < 0) {
    ferry_coco_close(coco);
    return st;
  }
  *out = coco;
  return FERRY_OK;
}

ferry_status ferry__coco_index_open_buffer(const void *data, size_t len, const char *name,
                                           const ferry_coco_options *opts, ferry_coco **out) {
  void *copy = ferry__malloc(len ? len : 1);  /* malloc's alignment suits every record */
  if (!copy) return ferry__fail(FERRY_ENOMEM, "%s: out of memory for a %zu-byte index", name, len);
  memcpy(copy, data, len);
  return adopt(copy, len, 0, name, opts, out);
}

/* 1 when no process but root, or the owner after a chmod, can change the file in place,
 * so that sharing its pages cannot let a rewrite or a truncation reach a reader (a
 * truncated MAP_SHARED page raises SIGBUS; a rewritten one changes checked slices).
 * Root writes through any mode bit, so a root process never shares. `cp` or an
 * editor that replaces the file (a new inode, as ferry's own writes do) never matters:
 * the open file keeps its old inode. */
static int file_sealed(const struct stat *sb) {
  uid_t me = geteuid();
  return S_ISREG(sb->st_mode) && (sb->st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0 && me != 0 &&
         (sb->st_uid == me || sb->st_uid == 0);
}

/* A cached index someone else could have planted or could rewrite: refused (it names
 * the file, and the caller parses the JSON instead). */
static ferry_status check_cache_owner(const char *path, const struct stat *sb) {
  uid_t me = geteuid();
  if (sb->st_uid != me && sb->st_uid != 0)
    return ferry__fail(FERRY_EIO, "%s: refused: owned by uid %ld, not by this user (%ld) or root", path,
                      (long)sb->st_uid, (long)me);
  if (sb->st_mode & (S_IWGRP | S_IWOTH))
    return ferry__fail(FERRY_EIO, "%s: refused: writable by other users (mode %03o)", path,
                      (unsigned)(sb->st_mode & 0777));
  return FERRY_OK;
}

/* The file's bytes in private memory: what it holds now, whatever it holds later. */
static ferry_status copy_file(const char *path, int fd, size_t size, void **bytes) {
  char *buf = ferry__malloc(size ? size : 1);  /* malloc's alignment suits every record */
  if (!buf) return ferry__fail(FERRY_ENOMEM, "%s: out of memory for a %zu-byte index", path, size);
  size_t got = 0;
  while (got < size) {
    ssize_t n = read(fd, buf + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ferry__free(buf);
      if (n < 0) return ferry__fail(FERRY_EIO, "%s: read error: %s", path, strerror(errno));
      return ferry__fail(FERRY_EIO, "%s: cut from %zu to %zu bytes while it was being read", path, size, got);
    }
    got += (size_t)n;
  }
  *bytes = buf;
  return FERRY_OK;
}

/* Map a sealed file shared (*mapped = 1), else copy it; either way nothing later done
 * to the file reaches the bytes returned. */
static ferry_status load_file(const char *path, unsigned flags, void **bytes, size_t *len, int *mapped) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ferry__fail(FERRY_EIO, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  ferry_status st = FERRY_OK;
  if (fstat(fd, &sb) != 0) st = ferry__fail(FERRY_EIO, "%s: cannot stat: %s", path, strerror(errno));
  if (st == FERRY_OK && (flags & FERRY__INDEX_CACHED)) st = check_cache_owner(path, &sb);
  if (st == FERRY_OK && sb.st_size < (off_t)sizeof(ferry__index_header))
    st = ferry__fail(FERRY_EFORMAT, "%s: not a valid ferry index: truncated (%lld bytes, the header alone is %zu)",
                     path, (long long)sb.st_size, sizeof(ferry__index_header));
  *mapped = st == FERRY_OK && file_sealed(&sb);
  if (st == FERRY_OK && *mapped) {
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) st = ferry__fail(FERRY_EIO, "%s: cannot map: %s", path, strerror(errno));
    else *bytes = map;
  } else if (st == FERRY_OK) {
    st = copy_file(path, fd, (size_t)sb.st_size, bytes);
  }
  if (st == FERRY_OK) *len = (size_t)sb.st_size;
  close(fd);
  return st;
}

ferry_status ferry__coco_index_open(const char *path, unsigned flags, const ferry_coco_options *opts,
                                    ferry_coco **out) {
  void *bytes = NULL;
  size_t len = 0;
  int mapped = 0;
  ferry_status st = load_file(path, flags, &bytes, &len, &mapped);
  return st < 0 ? st : adopt(bytes, len, mapped, path, opts, out);
}

void ferry__coco_index_source_of(const ferry_coco *coco, ferry__index_source *out) {
  const ferry__index_header *h = coco->backing;
  out->size = h->source_size;
  out->mtime_s = h->source_mtime_s;
  out->mtime_ns = h->source_mtime_ns;
  out->hash = h->source_hash;
}

ferry_status ferry_coco_index_verify(const char *index_path) {
  if (!index_path) return ferry__fail(FERRY_EINVAL, "ferry_coco_index_verify: NULL argument");
  ferry_coco *coco = NULL;
  ferry_status st = ferry__coco_index_open(index_path, 0, NULL, &coco);
  if (st < 0) return st;
  ferry__index_header h;
  memcpy(&h, coco->backing, sizeof h);
  st = verify_sections(index_path, coco->backing, &h, 1);
  ferry_coco_close(coco);
  return st;
}
