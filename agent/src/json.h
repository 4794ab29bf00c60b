/* Minimal JSON reader (jsmn-style tokens) and writer for the agent protocol. */
#ifndef FVM_JSON_H
#define FVM_JSON_H
#include <stddef.h>
#include <stdint.h>

enum jtype { J_UNDEF = 0, J_OBJ, J_ARR, J_STR, J_PRIM };

typedef struct {
  enum jtype type;
  int start, end; /* byte offsets into the source; strings exclude quotes */
  int size;       /* children: members for objects (key count), items for arrays */
  int parent;
} jtok;

typedef struct {
  const char *src;
  int len;
  jtok *toks;
  int ntok;
} jdoc;

/* Parse src into doc (tokens allocated, max_tokens bound). 0 on success, -1 on malformed input. */
int json_parse(jdoc *doc, const char *src, int len, int max_tokens);
void json_free(jdoc *doc);
/* Index of the token after tok i and all its descendants. */
int json_skip(const jdoc *doc, int i);
/* Value token for key in object token obj, or -1. */
int json_get(const jdoc *doc, int obj, const char *key);
/* Unescaped copy of a string token (malloc'd, NUL-terminated), or NULL if not a string. outlen may be NULL. */
char *json_strdup(const jdoc *doc, int i, size_t *outlen);
/* Integer value of a primitive token; returns 0 on success. */
int json_int(const jdoc *doc, int i, int64_t *out);
/* 1 for true, 0 for false, -1 when not a boolean. */
int json_bool(const jdoc *doc, int i);

/* Growable output buffer. */
typedef struct {
  char *buf;
  size_t len, cap;
  int oom;
} jbuf;

void jb_init(jbuf *b);
void jb_free(jbuf *b);
void jb_raw(jbuf *b, const char *s, size_t n);
void jb_cstr(jbuf *b, const char *s);
void jb_str(jbuf *b, const char *s, size_t n); /* quoted, escaped */
void jb_key(jbuf *b, const char *k);            /* "k": (caller manages commas) */
void jb_int(jbuf *b, int64_t v);
void jb_uint(jbuf *b, uint64_t v);
void jb_double(jbuf *b, double v);
#endif
