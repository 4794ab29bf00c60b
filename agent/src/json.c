#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Recursive-descent parser that emits tokens in document order. Depth is bounded so that a
 * hostile or buggy peer cannot blow the stack. */
#define MAX_DEPTH 32

typedef struct {
  jdoc *d;
  int pos, max;
} pstate;

static void skip_ws(pstate *p) {
  while (p->pos < p->d->len) {
    char c = p->d->src[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int new_tok(pstate *p, enum jtype t, int start, int parent) {
  if (p->d->ntok >= p->max) return -1;
  int i = p->d->ntok++;
  p->d->toks[i] = (jtok){t, start, start, 0, parent};
  return i;
}

static int parse_value(pstate *p, int parent, int depth);

static int parse_string(pstate *p, int parent) {
  /* p->pos at opening quote */
  int start = ++p->pos;
  while (p->pos < p->d->len) {
    unsigned char c = (unsigned char)p->d->src[p->pos];
    if (c == '"') {
      int t = new_tok(p, J_STR, start, parent);
      if (t < 0) return -1;
      p->d->toks[t].end = p->pos;
      p->pos++;
      return t;
    }
    if (c < 0x20) return -1;
    if (c == '\\') {
      p->pos++;
      if (p->pos >= p->d->len) return -1;
      char e = p->d->src[p->pos];
      if (e == 'u') {
        for (int k = 1; k <= 4; k++) {
          if (p->pos + k >= p->d->len) return -1;
          char h = p->d->src[p->pos + k];
          if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return -1;
        }
        p->pos += 4;
      } else if (!strchr("\"\\/bfnrt", e)) {
        return -1;
      }
    }
    p->pos++;
  }
  return -1;
}

static int parse_prim(pstate *p, int parent) {
  int start = p->pos;
  while (p->pos < p->d->len) {
    char c = p->d->src[p->pos];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-' || c == '+' || c == '.' || c == 'E'))
      break;
    p->pos++;
  }
  if (p->pos == start) return -1;
  int n = p->pos - start;
  const char *s = p->d->src + start;
  if (!(n == 4 && !memcmp(s, "true", 4)) && !(n == 5 && !memcmp(s, "false", 5)) && !(n == 4 && !memcmp(s, "null", 4))) {
    if (!((s[0] >= '0' && s[0] <= '9') || s[0] == '-')) return -1;
  }
  int t = new_tok(p, J_PRIM, start, parent);
  if (t < 0) return -1;
  p->d->toks[t].end = p->pos;
  return t;
}

static int parse_container(pstate *p, int parent, int depth, int is_obj) {
  if (depth > MAX_DEPTH) return -1;
  int t = new_tok(p, is_obj ? J_OBJ : J_ARR, p->pos, parent);
  if (t < 0) return -1;
  p->pos++;
  skip_ws(p);
  char close = is_obj ? '}' : ']';
  if (p->pos < p->d->len && p->d->src[p->pos] == close) {
    p->pos++;
    p->d->toks[t].end = p->pos;
    return t;
  }
  for (;;) {
    skip_ws(p);
    if (p->pos >= p->d->len) return -1;
    if (is_obj) {
      if (p->d->src[p->pos] != '"') return -1;
      if (parse_string(p, t) < 0) return -1;
      skip_ws(p);
      if (p->pos >= p->d->len || p->d->src[p->pos] != ':') return -1;
      p->pos++;
      skip_ws(p);
    }
    if (parse_value(p, t, depth + 1) < 0) return -1;
    p->d->toks[t].size++;
    skip_ws(p);
    if (p->pos >= p->d->len) return -1;
    char c = p->d->src[p->pos++];
    if (c == close) break;
    if (c != ',') return -1;
  }
  p->d->toks[t].end = p->pos;
  return t;
}

static int parse_value(pstate *p, int parent, int depth) {
  skip_ws(p);
  if (p->pos >= p->d->len) return -1;
  char c = p->d->src[p->pos];
  if (c == '{') return parse_container(p, parent, depth, 1);
  if (c == '[') return parse_container(p, parent, depth, 0);
  if (c == '"') return parse_string(p, parent);
  return parse_prim(p, parent);
}

int json_parse(jdoc *doc, const char *src, int len, int max_tokens) {
  doc->src = src;
  doc->len = len;
  doc->ntok = 0;
  doc->toks = calloc((size_t)max_tokens, sizeof(jtok));
  if (!doc->toks) return -1;
  pstate p = {doc, 0, max_tokens};
  if (parse_value(&p, -1, 0) < 0) return -1;
  skip_ws(&p);
  return p.pos == len ? 0 : -1;
}

void json_free(jdoc *doc) {
  free(doc->toks);
  doc->toks = NULL;
}

int json_skip(const jdoc *doc, int i) {
  int end = doc->toks[i].end;
  int j = i + 1;
  /* Children always start before the parent's end offset; tokens are in document order. */
  while (j < doc->ntok && doc->toks[j].start < end) j++;
  return j;
}

static int str_eq(const jdoc *doc, int i, const char *key) {
  const jtok *t = &doc->toks[i];
  size_t n = (size_t)(t->end - t->start);
  return t->type == J_STR && strlen(key) == n && memcmp(doc->src + t->start, key, n) == 0;
}

int json_get(const jdoc *doc, int obj, const char *key) {
  if (obj < 0 || obj >= doc->ntok || doc->toks[obj].type != J_OBJ) return -1;
  int i = obj + 1;
  for (int k = 0; k < doc->toks[obj].size; k++) {
    int v = i + 1;
    if (str_eq(doc, i, key)) return v;
    i = json_skip(doc, v);
  }
  return -1;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

char *json_strdup(const jdoc *doc, int i, size_t *outlen) {
  if (i < 0 || i >= doc->ntok || doc->toks[i].type != J_STR) return NULL;
  const jtok *t = &doc->toks[i];
  const char *s = doc->src + t->start;
  size_t n = (size_t)(t->end - t->start);
  char *out = malloc(n + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t k = 0; k < n; k++) {
    if (s[k] != '\\') { out[o++] = s[k]; continue; }
    char e = s[++k];
    switch (e) {
      case 'n': out[o++] = '\n'; break;
      case 't': out[o++] = '\t'; break;
      case 'r': out[o++] = '\r'; break;
      case 'b': out[o++] = '\b'; break;
      case 'f': out[o++] = '\f'; break;
      case 'u': {
        unsigned cp = (unsigned)(hexval(s[k + 1]) << 12 | hexval(s[k + 2]) << 8 | hexval(s[k + 3]) << 4 | hexval(s[k + 4]));
        k += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && k + 6 < n + 0 && s[k + 1] == '\\' && s[k + 2] == 'u') {
          unsigned lo = (unsigned)(hexval(s[k + 3]) << 12 | hexval(s[k + 4]) << 8 | hexval(s[k + 5]) << 4 | hexval(s[k + 6]));
          if (lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            k += 6;
          }
        }
        /* \u escapes never expand beyond the 6 source bytes they occupy (max 4 UTF-8 bytes). */
        o += put_utf8(out + o, cp);
        break;
      }
      default: out[o++] = e; break;
    }
  }
  out[o] = 0;
  if (outlen) *outlen = o;
  return out;
}

int json_int(const jdoc *doc, int i, int64_t *out) {
  if (i < 0 || i >= doc->ntok || doc->toks[i].type != J_PRIM) return -1;
  const jtok *t = &doc->toks[i];
  char tmp[32];
  int n = t->end - t->start;
  if (n <= 0 || n >= (int)sizeof tmp) return -1;
  memcpy(tmp, doc->src + t->start, (size_t)n);
  tmp[n] = 0;
  char *end;
  double d = strtod(tmp, &end);
  if (*end) return -1;
  *out = (int64_t)d;
  return 0;
}

int json_bool(const jdoc *doc, int i) {
  if (i < 0 || i >= doc->ntok || doc->toks[i].type != J_PRIM) return -1;
  const char *s = doc->src + doc->toks[i].start;
  if (!strncmp(s, "true", 4)) return 1;
  if (!strncmp(s, "false", 5)) return 0;
  return -1;
}

void jb_init(jbuf *b) { memset(b, 0, sizeof *b); }
void jb_free(jbuf *b) { free(b->buf); memset(b, 0, sizeof *b); }

static int jb_grow(jbuf *b, size_t extra) {
  if (b->oom) return -1;
  if (b->len + extra + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *nb = realloc(b->buf, cap);
  if (!nb) { b->oom = 1; return -1; }
  b->buf = nb;
  b->cap = cap;
  return 0;
}

void jb_raw(jbuf *b, const char *s, size_t n) {
  if (jb_grow(b, n) < 0) return;
  memcpy(b->buf + b->len, s, n);
  b->len += n;
  b->buf[b->len] = 0;
}
void jb_cstr(jbuf *b, const char *s) { jb_raw(b, s, strlen(s)); }

void jb_str(jbuf *b, const char *s, size_t n) {
  if (jb_grow(b, n * 6 + 2) < 0) return;
  char *o = b->buf + b->len;
  *o++ = '"';
  for (size_t k = 0; k < n; k++) {
    unsigned char c = (unsigned char)s[k];
    if (c == '"' || c == '\\') { *o++ = '\\'; *o++ = (char)c; }
    else if (c == '\n') { *o++ = '\\'; *o++ = 'n'; }
    else if (c == '\r') { *o++ = '\\'; *o++ = 'r'; }
    else if (c == '\t') { *o++ = '\\'; *o++ = 't'; }
    else if (c < 0x20 || c == 0x7f) { o += sprintf(o, "\\u%04x", c); }
    else *o++ = (char)c;
  }
  *o++ = '"';
  b->len = (size_t)(o - b->buf);
  b->buf[b->len] = 0;
}

void jb_key(jbuf *b, const char *k) {
  jb_str(b, k, strlen(k));
  jb_raw(b, ":", 1);
}

void jb_int(jbuf *b, int64_t v) {
  char t[32];
  int n = snprintf(t, sizeof t, "%lld", (long long)v);
  jb_raw(b, t, (size_t)n);
}
void jb_uint(jbuf *b, uint64_t v) {
  char t[32];
  int n = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
  jb_raw(b, t, (size_t)n);
}
void jb_double(jbuf *b, double v) {
  char t[64];
  int n = snprintf(t, sizeof t, "%.6g", v);
  jb_raw(b, t, (size_t)n);
}
