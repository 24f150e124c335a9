/* coco/json_stream.c - opening a COCO object without building its whole jansson tree.
 *
 * A jansson tree costs ~8x its text (train2017's 450 MB became 4 GB), almost all of it
 * in "annotations". Here the top level is walked by a small scanner: every other
 * top-level value is loaded by jansson into a root object as usual (categories and
 * images, parsed first, as coco/parse.c does), and then each element of
 * "annotations" is loaded, converted and freed in turn. jansson itself still checks
 * every value; the scanner only finds where values end and checks the punctuation
 * between them.
 *
 * The result is all or nothing: whenever anything is off (a syntax error, a key with
 * escapes, deep nesting, a semantic error) the attempt is dropped and the caller parses
 * the whole text the usual way, so that every error message, and which error wins in a
 * file with several, is exactly the whole-tree parse's. Out of memory alone ends the
 * open (FERRY_ENOMEM): the whole tree would need more.
 * Called only by coco.c for a strict open (no on_problem), on the opening thread; a
 * collecting open wants every problem reported once, which only the whole tree does.
 */
#include <string.h>

#include "coco/json_load.h"
#include "coco/json_stream.h"
#include "coco/parse.h"
#include "coco/store.h"
#include "lib/status.h"

/* Below jansson's own limit (2048), counting from a value nested two deep in the file. */
#define MAX_STREAM_DEPTH 1024

typedef struct scanner {
  const char *s;
  size_t len, pos;
  int out_of_memory;  /* the one failure that ends the open instead of a fall-back */
} scanner;

static void skip_space(scanner *sc) {
  while (sc->pos < sc->len) {
    char c = sc->s[sc->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    sc->pos++;
  }
}

static int at(const scanner *sc, char c) { return sc->pos < sc->len && sc->s[sc->pos] == c; }

/* Past the string starting at pos; 0 if it does not end. */
static int skip_string(scanner *sc) {
  for (sc->pos++; sc->pos < sc->len; sc->pos++) {
    char c = sc->s[sc->pos];
    /* Skip the escaped character: it cannot end the string. */
    if (c == '\\') sc->pos++;
    else if (c == '"') {
      sc->pos++;
      return 1;
    }
  }
  return 0;
}

static int is_delimiter(char c) { return c == ',' || c == ']' || c == '}' || c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Past one value starting at pos (its content is left to jansson); 0 if the text ends
 * first, brackets do not match in kind of count, or nesting passes MAX_STREAM_DEPTH. */
static int skip_value(scanner *sc) {
  size_t depth = 0, start = sc->pos;
  do {
    if (sc->pos >= sc->len) return 0;
    char c = sc->s[sc->pos];
    if (c == '"') {
      if (!skip_string(sc)) return 0;
    } else if (c == '[' || c == '{') {
      if (++depth > MAX_STREAM_DEPTH) return 0;
      sc->pos++;
    } else if (c == ']' || c == '}') {
      if (depth == 0) return 0;
      depth--;
      sc->pos++;
    } else if (depth == 0) {
      /* A top-level scalar ends at the next delimiter; whether it is a valid number or
       * literal is jansson's to say when the span is loaded. */
      while (sc->pos < sc->len && !is_delimiter(sc->s[sc->pos])) sc->pos++;
      return sc->pos > start;
    } else {
      sc->pos++;
    }
  } while (depth > 0);
  return 1;
}

static json_t *load_span(scanner *sc, size_t start) {
  json_error_t err;
  int out_of_memory;
  json_t *v = ferry__coco_json_load(sc->s + start, sc->pos - start, &err, &out_of_memory);
  sc->out_of_memory |= out_of_memory;
  return v;
}

/* 1 to go on; 0 to stop, noting out of memory. */
static int converted(scanner *sc, ferry_status st) {
  sc->out_of_memory |= st == FERRY_ENOMEM;
  return st == FERRY_OK;
}

/* One "key": value of the top-level object. Arrays of annotations are only located
 * (*anns = their start); everything else goes into root. 0 to give up. */
static int top_member(scanner *sc, json_t *root, size_t *anns) {
  if (!at(sc, '"')) return 0;
  size_t key = sc->pos + 1;
  if (!skip_string(sc)) return 0;
  size_t key_len = sc->pos - 1 - key;
  /* A key with escapes would have to be decoded to be compared or stored; COCO files
   * have none, so such a file takes the whole-tree way rather than a second decoder. */
  if (memchr(sc->s + key, '\\', key_len)) return 0;
  skip_space(sc);
  if (!at(sc, ':')) return 0;
  sc->pos++;
  skip_space(sc);
  size_t value = sc->pos;
  if (!skip_value(sc)) return 0;
  int is_anns = key_len == 11 && memcmp(sc->s + key, "annotations", 11) == 0;
  if (is_anns) json_object_del(root, "annotations");  /* the last of repeated keys wins */
  *anns = is_anns && sc->s[value] == '[' ? value : (is_anns ? 0 : *anns);
  if (*anns == value) return 1;
  json_t *v = load_span(sc, value);
  return v && json_object_setn_new(root, sc->s + key, key_len, v) == 0;
}

/* The top-level object, less a located "annotations" array. */
static json_t *load_top(scanner *sc, size_t *anns) {
  json_t *root = json_object();
  *anns = 0;
  skip_space(sc);
  sc->out_of_memory |= !root;
  if (!root || !at(sc, '{')) goto give_up;
  sc->pos++;
  skip_space(sc);
  if (at(sc, '}')) sc->pos++;
  else
    for (;;) {
      if (!top_member(sc, root, anns)) goto give_up;
      skip_space(sc);
      if (at(sc, '}')) {
        sc->pos++;
        break;
      }
      if (!at(sc, ',')) goto give_up;
      sc->pos++;
      skip_space(sc);
    }
  skip_space(sc);
  /* Text after the object: the whole-tree parse reports it, with jansson's message. */
  if (sc->pos != sc->len) goto give_up;
  return root;
give_up:
  json_decref(root);
  return NULL;
}

/* Each element of the array at pos, loaded, converted, freed. 0 to give up. */
static int stream_annotations(ferry_coco *coco, scanner *sc) {
  sc->pos++;
  skip_space(sc);
  if (at(sc, ']')) return 1;
  for (size_t i = 0;; i++) {
    size_t start = sc->pos;
    if (!skip_value(sc)) return 0;
    json_t *elem = load_span(sc, start);
    if (!elem) return 0;
    /* i is the element's position in the file's array, so messages and json_index are
     * those of the whole-tree parse. */
    ferry_status st = ferry__coco_add_annotation(coco, elem, i);
    json_decref(elem);
    if (!converted(sc, st)) return 0;
    skip_space(sc);
    if (at(sc, ']')) return 1;
    if (!at(sc, ',')) return 0;
    sc->pos++;
    skip_space(sc);
  }
}

/* All but the ending: 1 when parsed, 0 when given up (sc->out_of_memory says why). */
static int parse_streamed(ferry_coco *coco, scanner *sc) {
  size_t anns;
  coco->root = load_top(sc, &anns);
  /* "annotations" that is not an array stays in the root: parse.c's rules and messages */
  if (!coco->root || json_object_get(coco->root, "annotations") || !converted(sc, ferry__coco_parse_head(coco)))
    return 0;
  json_decref(coco->root);  /* categories and images are converted: their tree goes now */
  coco->root = NULL;
  sc->pos = anns;
  if (anns && !stream_annotations(coco, sc)) return 0;
  return converted(sc, ferry__coco_parse_finish(coco));
}

ferry_status ferry__coco_parse_streamed(ferry_coco *coco, const char *json, size_t len, int *declined) {
  scanner sc = {json, len, 0, 0};
  int done = parse_streamed(coco, &sc);
  *declined = !done && !sc.out_of_memory;
  if (sc.out_of_memory) return ferry__fail(FERRY_ENOMEM, "%s: out of memory parsing the JSON", coco->name);
  return done ? FERRY_OK : FERRY_EFORMAT;
}
